"""The sidecar transport: traffic carried and logged outside the rank (harness/sidecar.py)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from harness import Forbid, launch
from harness.commlog import as_log
from harness.errors import ForbiddenCallError
from harness.sidecar import WireMismatchError

P2P_ONLY = Forbid(allow_only=frozenset({"send", "recv", "isend", "irecv"}),
                  rule="point-to-point only")


def rank_ring(ctx, numel: int):
    """A ring pass with isend/recv, a blocking send/recv pair in a subgroup, collectives."""
    rank, world = ctx.rank, ctx.world_size
    x = torch.full((numel,), float(rank))
    got = torch.empty(numel)
    ctx.mark("ring")
    work = dist.isend(x, (rank + 1) % world)
    dist.recv(got, (rank - 1) % world)
    work.wait()
    pair = ctx.new_group([0, 1])
    if rank in (0, 1):
        ctx.mark("pair")
        y = torch.arange(4.0) + rank
        if rank == 0:
            dist.send(y, 1, group=pair)
        else:
            dist.recv(y, 0, group=pair)
        pair_value = y
    else:
        pair_value = None
    ctx.mark("collectives")
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    root = torch.tensor([float(rank)])
    dist.broadcast(root, src=2)
    gathered = [torch.empty(2) for _ in range(world)]
    dist.all_gather(gathered, torch.tensor([rank, -rank], dtype=torch.float32))
    flat = torch.empty(world)
    dist.all_gather_into_tensor(flat, torch.tensor([float(rank)]))
    out = torch.empty(1)
    dist.reduce_scatter_tensor(out, torch.arange(float(world)))
    at_root = [torch.empty(1) for _ in range(world)] if rank == 1 else None
    dist.gather(torch.tensor([10.0 + rank]), at_root, dst=1)
    dist.barrier()
    return {"got": got[:3], "pair": pair_value, "total": total, "root": root,
            "gathered": torch.stack(gathered), "flat": flat, "scattered": out,
            "at_root": torch.cat(at_root) if at_root else None}


def test_every_operation_the_suites_use_goes_through_the_sidecars():
    result = launch(rank_ring, 3, args=(1000,), backend="gloo", transport="sidecar",
                    timeout=60)
    assert result.transport == "sidecar" and result.wire is not None
    for rank, value in enumerate(result.values):
        assert value["got"].tolist() == [float((rank - 1) % 3)] * 3
        assert value["total"].item() == 6.0 and value["root"].item() == 2.0
        assert value["gathered"].tolist() == [[0, 0], [1, -1], [2, -2]]
        assert value["flat"].tolist() == [0, 1, 2] and value["scattered"].item() == 3.0 * rank
    assert result.values[1]["pair"].tolist() == [0, 1, 2, 3]
    assert result.values[1]["at_root"].tolist() == [10.0, 11.0, 12.0]
    kinds = [w.kind for w in result.wire[0]]
    assert kinds == ["send", "recv", "send", "allreduce", "broadcast", "allgather",
                     "allgather_base", "reduce_scatter_base", "gather", "barrier"]
    log = as_log(result.wire[0])  # the wire as a log the suites' window helpers read
    assert [r.op for r in log if r.op != "mark"][3:9] == [
        "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor",
        "reduce_scatter_tensor", "gather"]
    assert log[0].op == "mark" and log[0].label == "ring" and log[1].numel == 1000
    first = result.wire[0][0]
    assert (first.peer, first.bytes, first.group_ranks, first.label) == (1, 4000, (0, 1, 2),
                                                                         "ring")
    assert result.wire[1][2].kind == "recv" and result.wire[1][2].group_ranks == (0, 1)
    assert result.unlogged_bytes(0) is None or result.unlogged_bytes(0) < 64 * 1024


def rank_future(ctx):
    """An async collective's future holds its outputs, as with gloo (torch's comm-hook idiom)."""
    x = torch.full((3,), float(ctx.rank + 1))
    summed = dist.all_reduce(x, async_op=True).get_future().then(lambda f: f.value()[0] / 2)
    return summed.wait()


def test_an_async_collective_future_holds_its_outputs():
    result = launch(rank_future, 2, backend="gloo", transport="sidecar", timeout=60)
    assert [v.tolist() for v in result.values] == [[1.5, 1.5, 1.5]] * 2


def rank_hidden_all_reduce(ctx):
    """Hides a real all_reduce from the in-rank log by raising its re-entrancy depth."""
    log = ctx._log
    log._local.depth = 1
    x = torch.ones(8)
    dist.all_reduce(x)
    log._local.depth = 0
    return x


def test_a_collective_hidden_from_the_rank_log_is_forbidden_on_the_wire():
    with pytest.raises(ForbiddenCallError, match="ran allreduce on the wire"):
        launch(rank_hidden_all_reduce, 2, backend="gloo", transport="sidecar",
               forbid=P2P_ONLY, timeout=60)
    launch(rank_hidden_all_reduce, 2, backend="gloo", transport="in-rank", forbid=P2P_ONLY,
           timeout=60)  # in-rank, the same trick goes unseen


def rank_forged_log(ctx):
    """Sends zeros to its neighbour, but rewrites its log to claim a 1 MiB send."""
    from harness.commlog import CommRecord

    rank, world = ctx.rank, ctx.world_size
    dist.send(torch.zeros(4), (rank + 1) % world) if rank == 0 else \
        dist.recv(torch.zeros(4), (rank - 1) % world)
    records = ctx._log.records
    records[:] = [CommRecord(op="send" if r.op == "send" else r.op, peer=r.peer,
                             bytes=2**20 if r.op == "send" else r.bytes,
                             numel=r.numel, group_ranks=r.group_ranks) for r in records]
    return 0


def test_a_forged_rank_log_does_not_match_the_wire():
    with pytest.raises(WireMismatchError, match="rank 0: its communication log does not match"):
        launch(rank_forged_log, 2, backend="gloo", transport="sidecar", timeout=60)


def test_transport_is_checked():
    with pytest.raises(ValueError, match="transport"):
        launch(rank_forged_log, 1, transport="pigeon")


def rank_opens_a_socket(ctx):
    """After joining, try to reach another rank over TCP loopback."""
    import socket

    s = socket.socket()
    s.settimeout(2)
    try:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        client = socket.create_connection(s.getsockname(), timeout=2)
        client.close()
        return "connected"
    except OSError as exc:
        return type(exc).__name__
    finally:
        s.close()


def test_a_sidecar_rank_has_no_network():
    in_rank = launch(rank_opens_a_socket, 1, backend="gloo", transport="in-rank").values[0]
    sidecar = launch(rank_opens_a_socket, 1, backend="gloo", transport="sidecar").values[0]
    assert in_rank == "connected"
    assert sidecar != "connected", "a sidecar rank could still use loopback"


def test_the_sidecar_refuses_frames_and_tensors_over_its_caps():
    from harness import sidecar

    with pytest.raises(ValueError, match="bad tensor description"):
        sidecar._checked([{"shape": [2], "dtype": "load"}])
    with pytest.raises(ValueError, match="over the sidecar's cap"):
        sidecar._checked([{"shape": [2**20, 2**20], "dtype": "float32"}])
    with pytest.raises(ValueError, match="at most 1024"):
        sidecar._checked([{"shape": [1], "dtype": "float32"}] * 2000)
    assert sidecar._checked([{"shape": [2, 3], "dtype": "bfloat16"}]) == [([2, 3],
                                                                           torch.bfloat16)]


def any_source_and_backend(ctx):
    """What a correct student ring may also use: a receive with no source, batched p2p ops,
    objects, and the backend's name."""
    rank, world = ctx.rank, ctx.world_size
    got = torch.empty(2)
    if rank == 0:
        dist.send(torch.tensor([7.0, 8.0]), 1)
        source = None
    elif rank == 1:
        source = dist.recv(got)
    else:
        source = None
    mine, theirs = torch.full((3,), float(rank)), torch.empty(3)
    ops = [dist.P2POp(dist.isend, mine, (rank + 1) % world),
           dist.P2POp(dist.irecv, theirs, (rank - 1) % world)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    objects = [None] * world
    dist.all_gather_object(objects, {"rank": rank})
    return {"source": source, "got": got, "theirs": theirs, "objects": objects,
            "backend": str(dist.get_backend())}


def test_a_correct_ring_may_receive_from_any_source_and_see_gloo():
    """The transport must be invisible to correct code: a receive with no source returns the
    sender, batched isend/irecv work, and `dist.get_backend()` still says "gloo"."""
    result = launch(any_source_and_backend, 3, backend="gloo", transport="sidecar", timeout=60)
    assert result.values[1]["source"] == 0 and result.values[1]["got"].tolist() == [7.0, 8.0]
    for rank, value in enumerate(result.values):
        assert value["theirs"].tolist() == [float((rank - 1) % 3)] * 3
        assert value["objects"] == [{"rank": r} for r in range(3)]
        assert value["backend"] == "gloo"


def rank_mesh(ctx):
    """A 2 x 2 device mesh (as FSDP2's HSDP builds it) and an all-gather in each dimension."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    out = {}
    for name in ("replicate", "shard"):
        group = mesh.get_group(name)
        got = torch.empty(2)
        dist.all_gather_into_tensor(got, torch.tensor([float(ctx.rank)]), group=group)
        out[name] = got.tolist()
    return out


def test_a_device_mesh_names_and_uses_its_groups():
    """DeviceMesh resolves groups by name: the sidecar's Python ProcessGroup must keep the name
    c10d gives it (fsdp's FSDP2 strategies run over the sidecar)."""
    result = launch(rank_mesh, 4, backend="gloo", transport="sidecar", timeout=60)
    for rank, value in enumerate(result.values):
        row, col = divmod(rank, 2)
        assert value["shard"] == [float(2 * row), float(2 * row + 1)]
        assert value["replicate"] == [float(col), float(col + 2)]
    groups = {w.group_ranks for w in result.wire[0] if w.kind == "allgather_base"}
    assert groups == {(0, 1), (0, 2)}


@pytest.mark.parametrize("route", ["module", "ops", "namespace"])
def test_functional_collectives_are_carried_by_the_sidecar_or_refused(route):
    """They go from C++ to the backend past every wrapped function: on the sidecar they are
    carried and counted on the wire; in-rank, where nothing would count them, they raise."""
    from harness.tests.rankfns import functional_all_reduce

    result = launch(functional_all_reduce, 2, args=(route,), backend="gloo",
                    transport="sidecar", timeout=60)
    assert all(torch.equal(v, torch.full((4,), 2.0)) for v in result.values)
    assert all([w.kind for w in wire] == ["allreduce"] for wire in result.wire), result.wire
    with pytest.raises(ForbiddenCallError, match="functional collective"):
        launch(functional_all_reduce, 2, args=(route,), backend="gloo", timeout=60)
    allowed = launch(functional_all_reduce, 2, args=(route,), backend="gloo", timeout=60,
                     functional_collectives=True)
    assert all(torch.equal(v, torch.full((4,), 2.0)) for v in allowed.values)


def test_an_op_whose_kernel_cannot_be_replaced_is_skipped_not_a_crash(monkeypatch):
    """torch 2.11 already holds a Python kernel for one functional op at the composite key
    (found on a GPU machine: every rank died in `funcol.block`). Such an op falls back to the
    backend keys, and one that takes no kernel at all is skipped and named."""
    import torch

    from harness import funcol

    refused = {"_wrap_tensor_autograd"}
    calls: list[tuple[str, str]] = []

    class Library:
        def impl(self, op, kernel, key):
            calls.append((op, key))
            if op in refused and key == funcol.KEY:
                raise RuntimeError("already a kernel registered from python")
            if op == "stubborn":
                raise RuntimeError("no key takes it")

    library = Library()
    assert funcol._replace(library, "all_reduce", None, "_c10d_functional::all_reduce") == 1
    assert funcol._replace(library, "_wrap_tensor_autograd", None, "x::_wrap") == 1
    assert ("_wrap_tensor_autograd", "CPU") in calls and ("_wrap_tensor_autograd", "CUDA") in calls
    monkeypatch.setattr(funcol, "skipped", [])
    assert funcol._replace(library, "stubborn", None, "x::stubborn") == 0
    assert funcol.skipped == ["x::stubborn"]
    assert torch is not None


def rank_all_to_all(ctx):
    """Every all-to-all form a suite uses: equal and unequal splits of all_to_all_single, the
    list form, and the autograd one of torch.distributed.nn (its backward is another
    all-to-all). Rank r sends r + 1 + i rows of 3 to group rank i (unequal case)."""
    from torch.distributed.nn.functional import all_to_all_single as a2a_autograd

    rank, world = ctx.rank, ctx.world_size
    ctx.mark("equal")
    x = torch.arange(world * 2 * 3, dtype=torch.float64).view(world * 2, 3) + 100 * rank
    equal = torch.empty_like(x)
    dist.all_to_all_single(equal, x)
    ctx.mark("unequal")
    send = [rank + 1 + i for i in range(world)]
    recv = [s + 1 + rank for s in range(world)]
    rows = torch.arange(sum(send) * 3, dtype=torch.float32).view(-1, 3) + 1000 * rank
    unequal = torch.empty(sum(recv), 3)
    dist.all_to_all_single(unequal, rows, recv, send)
    ctx.mark("list")
    pieces = [torch.full((2,), float(10 * rank + i)) for i in range(world)]
    got = [torch.empty(2) for _ in range(world)]
    dist.all_to_all(got, pieces)
    ctx.mark("autograd")
    leaf = rows.clone().requires_grad_()
    out = a2a_autograd(torch.empty(sum(recv), 3), leaf, recv, send)
    (out * (rank + 1)).sum().backward()
    return {"equal": equal, "unequal": unequal, "list": torch.cat(got), "out": out.detach(),
            "grad": leaf.grad}


def test_all_to_all_is_carried_with_bytes_per_peer():
    """Equal, unequal, list and autograd all-to-alls give gloo's results over the sidecar, and
    the wire holds one record per operation with the bytes sent to each peer."""
    world = 3
    wire = launch(rank_all_to_all, world, backend="gloo", transport="sidecar", timeout=60)
    gloo = launch(rank_all_to_all, world, backend="gloo", timeout=60)
    for r in range(world):
        for key, value in gloo.values[r].items():
            assert torch.equal(wire.values[r][key], value), (r, key)
    for r, records in enumerate(wire.wire):
        kinds = [(w.kind, w.label) for w in records]
        assert kinds == [("alltoall_base", "equal"), ("alltoall_base", "unequal"),
                         ("alltoall", "list"), ("alltoall_base", "autograd"),
                         ("alltoall_base", "autograd")], kinds
        equal, unequal, listed, forward, backward = records
        assert equal.peer_bytes == (2 * 3 * 8,) * world and equal.out_bytes == world * 48
        assert unequal.peer_bytes == tuple((r + 1 + i) * 3 * 4 for i in range(world))
        assert unequal.out_bytes == sum(s + 1 + r for s in range(world)) * 3 * 4
        assert listed.peer_bytes == (8,) * world and listed.out_bytes == world * 8
        assert forward.peer_bytes == unequal.peer_bytes
        assert backward.peer_bytes == tuple((r + 1 + s) * 3 * 4 for s in range(world))
    log = [c for c in as_log(wire.wire[1]) if c.op != "mark"]
    assert [c.op for c in log] == ["all_to_all_single"] * 2 + ["all_to_all"] + \
        ["all_to_all_single"] * 2
    assert (log[1].numel, log[1].out_numel) == (sum(1 + 1 + i for i in range(world)) * 3,
                                                sum(s + 2 for s in range(world)) * 3)


def rank_hidden_all_to_all(ctx):
    """An all-to-all the in-rank log never sees (re-entrancy depth raised), and one by the
    functional collective, which no wrapped function sees either."""
    import torch.distributed._functional_collectives as fc

    log = ctx._log
    log._local.depth = 1
    x = torch.arange(4.0) + 10 * ctx.rank
    out = torch.empty(4)
    dist.all_to_all_single(out, x)
    log._local.depth = 0
    functional = fc.wait_tensor(fc.all_to_all_single(x, [2, 2], [2, 2], dist.group.WORLD))
    return {"out": out, "functional": functional, "logged": len(log.records)}


def test_an_all_to_all_hidden_from_the_rank_log_is_on_the_wire():
    result = launch(rank_hidden_all_to_all, 2, backend="gloo", transport="sidecar", timeout=60)
    assert result.values[0]["out"].tolist() == [0.0, 1.0, 10.0, 11.0]
    assert result.values[1]["functional"].tolist() == [2.0, 3.0, 12.0, 13.0]
    for records in result.wire:
        assert [w.kind for w in records] == ["alltoall_base"] * 2
        assert all(w.peer_bytes == (8, 8) for w in records)
    with pytest.raises(ForbiddenCallError, match="ran alltoall_base on the wire"):
        launch(rank_hidden_all_to_all, 2, backend="gloo", transport="sidecar", timeout=60,
               forbid=P2P_ONLY)


def test_all_to_all_splits_from_the_rank_are_checked():
    from harness import sidecar

    tensor = torch.zeros(6, 2)
    assert sidecar._splits([], tensor, 3, "input") == [2, 2, 2]
    assert sidecar._splits([1, 5, 0], tensor, 3, "input") == [1, 5, 0]
    for bad in ([1, 1], [3, 4, -1], [1, 1, 1], ["1", 2, 3]):
        with pytest.raises(ValueError, match="splits"):
            sidecar._splits(bad, tensor, 3, "input")
    with pytest.raises(ValueError, match="do not split equally"):
        sidecar._splits([], torch.zeros(5), 3, "output")


def rank_scatter_reduce(ctx):
    """scatter and reduce, and torch.distributed.nn's all_gather, whose backward on gloo is an
    all-to-all made of scatters (a student's all-gather with autograd goes that way)."""
    from torch.distributed.nn.functional import all_gather as all_gather_autograd

    rank, world = ctx.rank, ctx.world_size
    parts = [torch.full((2,), 10.0 * i) for i in range(world)] if rank == 1 else None
    got = torch.empty(2)
    dist.scatter(got, parts, src=1)
    total = torch.full((3,), float(rank + 1))
    dist.reduce(total, dst=0)
    leaf = torch.full((2,), float(rank)).requires_grad_()
    gathered = all_gather_autograd(leaf)
    sum((g * (i + 1)).sum() for i, g in enumerate(gathered)).backward()
    return {"got": got, "total": total if rank == 0 else torch.zeros(3),
            "gathered": torch.stack([g.detach() for g in gathered]), "grad": leaf.grad}


def test_scatter_reduce_and_the_autograd_all_gather_match_gloo():
    wire = launch(rank_scatter_reduce, 3, backend="gloo", transport="sidecar", timeout=60)
    gloo = launch(rank_scatter_reduce, 3, backend="gloo", timeout=60)
    for r in range(3):
        for key, value in gloo.values[r].items():
            assert torch.equal(wire.values[r][key], value), (r, key)
    root = wire.wire[1]
    assert (root[0].kind, root[0].peer, root[0].peer_bytes) == ("scatter", 1, (8, 8, 8))
    assert [w.kind for w in wire.wire[0][:3]] == ["scatter", "reduce", "allgather"]


def rank_backend_object(ctx):
    """An all-reduce on the process group's backend object, which no wrapped function sees."""
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    x = torch.ones(3)
    backend.allreduce([x], dist.AllreduceOptions()).wait()
    return x


def test_the_backend_object_is_the_sidecar_group():
    result = launch(rank_backend_object, 2, backend="gloo", transport="sidecar", timeout=60)
    assert [v.tolist() for v in result.values] == [[2.0, 2.0, 2.0]] * 2
    assert [w.kind for w in result.wire[0]] == ["allreduce"]
    with pytest.raises(ForbiddenCallError, match="ran allreduce on the wire"):
        launch(rank_backend_object, 2, backend="gloo", transport="sidecar", forbid=P2P_ONLY,
               timeout=60)


def rank_unwaited_send(ctx):
    """Rank 0 returns at once after an isend it never waits for; rank 1 receives later."""
    import time

    if ctx.rank == 0:
        dist.isend(torch.arange(4.0), 1)
        return None
    time.sleep(0.5)
    got = torch.empty(4)
    dist.recv(got, 0)
    return got


def test_a_send_left_unwaited_still_arrives_after_its_rank_disconnects():
    result = launch(rank_unwaited_send, 2, backend="gloo", transport="sidecar", timeout=60)
    assert result.values[1].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_sidecar_server_whose_parent_died_while_it_started_ends_at_once():
    """The server dies with its parent (PR_SET_PDEATHSIG), but the signal only covers a death
    after the call that asks for it, seconds into its start: a server started for a parent
    that is already gone (here: a pid that is not its parent) must end rather than wait on
    its input for ever."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-c", "from harness.sidecar import _server_main; _server_main()"]
    not_the_parent = os.getppid()
    server = subprocess.Popen([*command, str(not_the_parent)], stdin=subprocess.PIPE,
                              cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    try:
        assert server.wait(timeout=60) == 0
    finally:
        server.kill()
        server.wait()

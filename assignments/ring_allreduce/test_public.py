"""Public tests of ring_allreduce (20 of 100 points): run `pytest assignments/ring_allreduce`.

Each test starts fresh rank processes with `launch`, runs a rank function there (the functions
named `rank_*` below, which import your ring.py through `ctx.impl_module`), and compares what the
ranks return with plain torch computed here. Every launch allows only point-to-point calls: a
collective such as `dist.all_reduce` fails the test. Multi-rank launches use the sidecar
transport: each rank's traffic is carried by a helper process outside it, and the messages the
cost test counts are the ones it carried (`result.wire`), not the rank's own log. The hidden
suite checks the same things more thoroughly: world sizes 1-6, every op and dtype, odd sizes,
non-contiguous inputs, subgroups.
"""

from __future__ import annotations

import math

import pytest
import torch

from grader.compare import assert_close
from harness import P2P_APIS, Forbid, RankTimeout
from harness.commlog import as_log

TIMEOUT_S = 60.0
TRANSPORT = "sidecar"  # traffic carried, counted and judged outside the rank
HANG_TIMEOUT_S = 20.0  # the deadlock test: a hang fails after this long instead of a minute
P2P_ONLY = Forbid(allow_only=P2P_APIS, rule="only point-to-point calls (send, recv, isend, "
                                             "irecv, batch_isend_irecv) are allowed")
SHIFT_ONLY = Forbid(allow_only=frozenset({"send", "recv"}),
                    rule="ring_shift uses only blocking dist.send and dist.recv")


def rank_input(rank: int, numel: int) -> torch.Tensor:
    """What rank `rank` contributes: small integers, so every sum is exact in float32."""
    return ((torch.arange(numel) * (rank + 3) + 7 * rank) % 11 - 5).to(torch.float32)


# ---- rank functions: these run inside the rank processes ----------------------------------

def rank_chunk_bounds(ctx, pairs):
    ring = ctx.impl_module("ring_allreduce", "ring")
    return [[list(b) for b in ring.chunk_bounds(numel, size)] for numel, size in pairs]


def rank_shift(ctx, numel):
    ring = ctx.impl_module("ring_allreduce", "ring")
    return ring.ring_shift(torch.full((numel,), float(ctx.rank), device=ctx.device))


def rank_all_reduce(ctx, numel, op):
    ring = ctx.impl_module("ring_allreduce", "ring")
    tensor = rank_input(ctx.rank, numel).to(ctx.device)
    returned = ring.ring_all_reduce(tensor, op=op)
    return {"tensor": tensor, "returned_input": returned is tensor}


def rank_reduce_scatter_all_gather(ctx, numel):
    ring = ctx.impl_module("ring_allreduce", "ring")
    tensor = rank_input(ctx.rank, numel).to(ctx.device)
    chunk = ring.ring_reduce_scatter(tensor, op="sum")
    unchanged = torch.equal(tensor.cpu(), rank_input(ctx.rank, numel))
    start, end = ring.chunk_bounds(numel, ctx.world_size)[ctx.rank]
    full = torch.full((numel,), -1.0, device=ctx.device)  # only this rank's chunk is valid
    full[start:end] = chunk
    gathered = ring.ring_all_gather(full)
    return {"chunk": chunk, "input_unchanged": unchanged, "gathered": gathered,
            "returned_input": gathered is full}


# ---- tests ----------------------------------------------------------------------------------

@pytest.mark.exercises("chunk_bounds")
@pytest.mark.points(4)
def test_chunk_bounds(launch):
    pairs = [(10, 4), (8, 4), (3, 4), (0, 2), (7, 1)]
    expected = [[[0, 3], [3, 6], [6, 8], [8, 10]], [[0, 2], [2, 4], [4, 6], [6, 8]],
                [[0, 1], [1, 2], [2, 3], [3, 3]], [[0, 0], [0, 0]], [[0, 7]]]
    got = launch(rank_chunk_bounds, 1, args=(pairs,), timeout=TIMEOUT_S).values[0]
    for (numel, size), g, e in zip(pairs, got, expected):
        assert g == e, (f"chunk_bounds({numel}, {size}) returned {g}, expected {e}: sizes "
                        "differ by at most one and the first numel % world_size are larger")


@pytest.mark.exercises("ring_shift")
@pytest.mark.points(4)
def test_ring_shift_three_ranks_large_message(launch):
    """4 MiB per rank on 3 ranks: sends really block, so a wrong order deadlocks here."""
    world_size, numel = 3, 1 << 20
    try:
        result = launch(rank_shift, world_size, args=(numel,), forbid=SHIFT_ONLY,
                        transport=TRANSPORT, timeout=HANG_TIMEOUT_S)
    except RankTimeout as exc:
        raise AssertionError(
            f"ring_shift on {world_size} ranks did not finish within {HANG_TIMEOUT_S:g} s: "
            "does every rank send first? A blocking send waits for its receiver, so that is a "
            f"cycle of waits. See README §3.\n{exc}") from None
    for rank, got in enumerate(result.values):
        source = (rank - 1) % world_size
        assert_close(got, torch.full((numel,), float(source)),
                     what=f"[rank {rank} of {world_size}] ring_shift",
                     hint=f"rank {rank} must receive from rank {source}")


@pytest.mark.exercises("ring_all_reduce")
@pytest.mark.points(2)
@pytest.mark.parametrize("world_size", [2, 4], ids="world_size={}".format)
def test_ring_all_reduce_sum(launch, world_size):
    numel = 10  # not a multiple of 4: chunks of different sizes
    result = launch(rank_all_reduce, world_size, args=(numel, "sum"), forbid=P2P_ONLY,
                    transport=TRANSPORT, timeout=TIMEOUT_S)
    expected = sum(rank_input(r, numel) for r in range(world_size))
    for rank, got in enumerate(result.values):
        what = f"[rank {rank} of {world_size}] ring_all_reduce(op='sum')"
        assert got["returned_input"], f"{what} must return the tensor it was given"
        assert_close(got["tensor"], expected, what=what,
                     hint="check the chunk indices, N-1 steps per phase, and that the result "
                          "is written into `tensor` itself")


@pytest.mark.exercises("ring_reduce_scatter", "ring_all_gather")
@pytest.mark.points(3)
def test_ring_reduce_scatter_and_all_gather(launch):
    world_size, numel = 4, 10
    result = launch(rank_reduce_scatter_all_gather, world_size, args=(numel,),
                    forbid=P2P_ONLY, transport=TRANSPORT, timeout=TIMEOUT_S)
    total = sum(rank_input(r, numel) for r in range(world_size))
    bounds = [(0, 3), (3, 6), (6, 8), (8, 10)]
    for rank, got in enumerate(result.values):
        where = f"[rank {rank} of {world_size}]"
        start, end = bounds[rank]
        assert_close(got["chunk"], total[start:end], what=f"{where} ring_reduce_scatter",
                     hint=f"rank {rank} returns chunk {rank} of the sum")
        assert got["input_unchanged"], (f"{where} ring_reduce_scatter modified its "
                                        f"input; reduce into a copy (tensor.clone())")
        assert got["returned_input"], f"{where} ring_all_gather must return its argument"
        assert_close(got["gathered"], total, what=f"{where} ring_all_gather",
                     hint="each chunk comes from the rank that owns it")


@pytest.mark.exercises("ring_all_reduce")
@pytest.mark.points(1)
@pytest.mark.parametrize("op", ["avg", "max"], ids="op={}".format)
def test_ring_all_reduce_avg_and_max(launch, op):
    world_size, numel = 3, 7
    result = launch(rank_all_reduce, world_size, args=(numel, op), forbid=P2P_ONLY,
                    transport=TRANSPORT, timeout=TIMEOUT_S)
    stacked = torch.stack([rank_input(r, numel) for r in range(world_size)])
    expected = stacked.mean(0) if op == "avg" else stacked.amax(0)
    for rank, got in enumerate(result.values):
        assert_close(got["tensor"], expected,
                     what=f"[rank {rank} of {world_size}] ring_all_reduce(op={op!r})",
                     hint="divide by N exactly once" if op == "avg" else "")


@pytest.mark.exercises("ring_all_reduce")
@pytest.mark.points(3)
def test_ring_all_reduce_cost(launch):
    """2(N-1) messages per rank, all to the successor, at most 2·ceil(D/N)·(N-1) elements."""
    world_size, numel = 4, 1001
    result = launch(rank_all_reduce, world_size, args=(numel, "sum"), forbid=P2P_ONLY,
                    transport=TRANSPORT, timeout=TIMEOUT_S)
    budget = 2 * math.ceil(numel / world_size) * (world_size - 1)
    problems = []  # (severity, how far over, text): bytes, then peers, then message counts
    for rank, carried in enumerate(result.wire):
        sends = [r for r in as_log(carried) if r.op == "send"]  # what the sidecar carried
        successor = (rank + 1) % world_size
        where = f"[rank {rank} of {world_size}] ring_all_reduce"
        total, sent = sum(r.numel for r in sends), sum(r.bytes for r in sends)
        if total > budget:
            allowed = budget * (sent // total)  # in bytes
            problems.append((0, sent - allowed, (
                f"{where} sent {sent} bytes, {total / budget:.1f}× the ring's budget of "
                f"{allowed}: send one chunk of about D/N elements per step, never the whole "
                f"tensor (budget 2·ceil(D/N)·(N-1) = {budget} elements for D={numel}, "
                f"N={world_size})")))
        stray = sorted({r.peer for r in sends if r.peer != successor}, key=str)
        if stray:
            problems.append((1, len(stray), (
                f"{where} sent to ranks {stray}; it may only send to its successor, "
                f"rank {successor}")))
        if len(sends) != 2 * (world_size - 1):
            around = ("; send through dist.send/isend/batch_isend_irecv" if not sends else "")
            problems.append((2, abs(len(sends) - 2 * (world_size - 1)), (
                f"{where} sent {len(sends)} messages; a ring sends 2(N-1) = "
                f"{2 * (world_size - 1)}, one chunk per step{around}")))
    if problems:
        ordered = sorted(problems, key=lambda p: (p[0], -p[1]))
        more = f" (and {len(ordered) - 1} more below)" if len(ordered) > 1 else ""
        raise AssertionError("\n".join([ordered[0][2] + more] + [p[2] for p in ordered[1:]]))

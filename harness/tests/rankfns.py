"""Rank functions used by the harness's own tests (module level, so ranks can import them)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import torch
import torch.distributed as dist


def describe(ctx):
    return {
        "rank": ctx.rank, "world_size": ctx.world_size, "backend": ctx.backend,
        "device": str(ctx.device), "pid": os.getpid(), "initialized": dist.is_initialized(),
        "dist_rank": dist.get_rank(), "dist_world": dist.get_world_size(),
        "threads": torch.get_num_threads(), "rand": torch.rand(3), "py_rand": random.random(),
        "seed": ctx.seed, "impl": ctx.impl,
    }


def echo(ctx, *args, **kwargs):
    return {"args": list(args), "kwargs": kwargs}


def plain_types(ctx):
    return {"t": torch.arange(4).view(2, 2)[:, 0], "f": 1.5, "i": 3, "s": "x", "b": True,
            "n": None, "l": [1, (2, 3)], 7: torch.nn.Parameter(torch.ones(2)),
            "size": torch.ones(2, 3).shape}


def return_object(ctx):
    return {"fine": 1, "bad": [object()]}


def return_huge(ctx):
    return torch.zeros(4 * 1024 * 1024)  # 16 MiB


def raise_on_rank(ctx, bad_rank, sleep_s):
    if ctx.rank == bad_rank:
        print(f"about to fail on rank {ctx.rank}", flush=True)
        raise ValueError(f"rank {ctx.rank} hit a bad value")
    time.sleep(sleep_s)
    return ctx.rank


def deadlock(ctx):
    tensor = torch.zeros(1)
    dist.recv(tensor, src=(ctx.rank + 1) % ctx.world_size)  # everyone receives first
    return tensor


def spin_on_rank(ctx, rank):
    if ctx.rank == rank:
        while True:
            pass
    return ctx.rank


def ignore_sigterm_and_sleep(ctx):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(120)


def spawn_sleeper(ctx, pid_file):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(f"{pid_file}.{ctx.rank}", "w") as f:
        f.write(str(child.pid))
    return ctx.rank


def spawn_sleeper_and_hang(ctx, pid_file):
    spawn_sleeper(ctx, pid_file)
    time.sleep(120)


def exit_how(ctx, how, rank):
    if ctx.rank == rank:
        if how == "os_exit_0":
            os._exit(0)
        if how == "sys_exit_0":
            sys.exit(0)
        if how == "sys_exit_77":
            sys.exit(77)
        if how == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.2 if ctx.rank != rank else 0)
    return ctx.rank


def talk(ctx):
    """Point-to-point in a ring, then a few collectives, with a mark between."""
    world, rank = ctx.world_size, ctx.rank
    out = torch.arange(6, dtype=torch.float32)
    inbox = torch.empty(6)
    if rank % 2 == 0:
        dist.send(out, dst=(rank + 1) % world)
        dist.recv(inbox, src=(rank - 1) % world)
    else:
        dist.recv(inbox, src=(rank - 1) % world)
        dist.send(out, dst=(rank + 1) % world)
    ctx.mark("collectives")
    dist.all_reduce(torch.ones(5, dtype=torch.float64))
    dist.broadcast(torch.ones(3), src=1)
    shards = torch.empty(2 * world)
    dist.all_gather_into_tensor(shards, torch.ones(2))
    dist.reduce_scatter_tensor(torch.empty(2), torch.ones(2 * world))
    ops = [dist.P2POp(dist.isend, torch.ones(4), (rank + 1) % world),
           dist.P2POp(dist.irecv, torch.empty(4), (rank - 1) % world)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    return [r.to_plain() for r in ctx.comm_log()]


def subgroup_send(ctx):
    group = ctx.new_group([1, 3])
    if ctx.rank == 1:
        dist.send(torch.ones(2), group_dst=1, group=group)
    elif ctx.rank == 3:
        dist.recv(torch.empty(2), group_src=0, group=group)
    return ctx.rank


def forbidden_all_reduce(ctx, swallow):
    try:
        dist.all_reduce(torch.ones(1))
    except Exception:
        if not swallow:
            raise
    return ctx.rank


def process_group_method(ctx):
    group = dist.group.WORLD
    group.allreduce([torch.ones(2)]).wait()
    return ctx.rank


def use_impl(ctx, assignment_id, module):
    mod = ctx.impl_module(assignment_id, module)
    return {"value": mod.compute(3), "file": mod.__file__}


def print_lots(ctx, megabytes):
    chunk = "x" * (1024 * 1024 - 1)
    for _ in range(megabytes):
        print(chunk)
    return "done"


def hold(ctx):
    model = torch.nn.Linear(4, 4, bias=False)  # 16 floats = 64 bytes
    view_a, view_b = model.weight[0], model.weight[1]
    from harness import storage_bytes

    return storage_bytes(model, [view_a, view_b], {"x": torch.zeros(8, dtype=torch.float64)})


def forge_result_and_exit(ctx):
    """Write a plausible result file where the harness would, then leave without returning."""
    workdir = os.path.dirname(os.readlink("/proc/self/fd/1"))
    from harness import payload

    forged = os.path.join(workdir, f"rank{ctx.rank}.result.pt")
    payload.dump({"value": "forged", "comm": []}, forged)
    os._exit(0)


def send_ring(ctx, numel, hidden_all_reduce):
    tensor = torch.ones(numel)
    inbox = torch.empty(numel)
    right, left = (ctx.rank + 1) % ctx.world_size, (ctx.rank - 1) % ctx.world_size
    ops = [dist.P2POp(dist.isend, tensor, right), dist.P2POp(dist.irecv, inbox, left)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    if hidden_all_reduce:  # the backend object goes around torch.distributed's Python API
        backend = dist.group.WORLD._get_backend(torch.device("cpu"))
        backend.allreduce([tensor]).wait()
    return float(tensor.sum())


def has_module(ctx, name):
    import sys

    return name in sys.modules


def forge_hostile_result(ctx, kind):
    """Rank 1 writes a hostile result file itself and stops as a returned rank would; the
    others return honestly. `kind`: 'shared' (lists sharing references, 2^40 paths),
    'stride0' (a 1-element storage expanded to 2.4 GB)."""
    if ctx.rank != 1:
        return "honest"
    value = [0]
    if kind == "shared":
        for _ in range(40):
            value = [value, value]
    else:
        value = torch.zeros(1).expand(600_000_000)
    workdir = os.path.dirname(os.readlink("/proc/self/fd/1"))
    torch.save({"value": value, "comm": []}, os.path.join(workdir, f"rank{ctx.rank}.result.pt"))
    os.kill(os.getpid(), signal.SIGSTOP)  # look like a rank that returned
    return "unreachable"


def slow_sender(ctx, seconds):
    """Rank 1 computes for `seconds`, then sends; rank 0 waits for it in recv."""
    t = torch.zeros(1)
    if ctx.rank == 1:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t += 0.0
        dist.send(t + 1, dst=0)
        return None
    dist.recv(t, src=1)
    return float(t)


def preloaded(ctx, names):
    """Which of `names` the rank finds imported before it imports anything, and its
    TRITON_INTERPRET."""
    import os
    import sys

    return {"modules": {name: name in sys.modules for name in names},
            "triton_interpret": os.environ.get("TRITON_INTERPRET")}


def functional_all_reduce(ctx, route):
    """An all-reduce of ones by a functional collective (`route`: "module" for
    torch.distributed._functional_collectives, "ops" for the dispatcher op, "namespace" for a
    fresh op namespace), which no wrapped function sees; the rank logs nothing."""
    import torch.distributed._functional_collectives as fc

    x = torch.ones(4)
    if route == "module":
        return fc.wait_tensor(fc.all_reduce(x, "sum", dist.group.WORLD))
    # (cloudpickle cannot pickle a by-value function that names torch.ops directly)
    ops = getattr(torch, "ops") if route == "ops" else None  # noqa: B009
    namespace = ops._c10d_functional if ops is not None \
        else torch._ops._OpNamespace("_c10d_functional")
    out = namespace.all_reduce(x, "sum", dist.group.WORLD.group_name)
    return namespace.wait_tensor(out)


def fill_own_folder(ctx, files, chunk):
    """Write `files` files of `chunk` bytes each into the rank's own folder (found from its
    output log), then return: a rank that fills the disk."""
    import os

    folder = os.path.dirname(os.readlink("/proc/self/fd/1"))
    data = b"x" * chunk
    for i in range(files):
        with open(os.path.join(folder, f"fill{i}"), "wb") as f:
            f.write(data)
    return files

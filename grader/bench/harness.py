"""Per-call overhead of the harness vs torch.multiprocessing.spawn for a trivial all-reduce.

Both sides do the same work per call: start `world_size` fresh processes, form a gloo process
group through a FileStore in a fresh temp dir, all-reduce one float, tear the group down and
exit. The harness forks its ranks from a forkserver that already imported torch; `mp.spawn`
starts new interpreters that import torch each time. The two are timed alternately in one run
(so machine load hits both alike) and the median of `--runs` calls is reported with the ratio.

Targets (docs/design.md, principle 3) on a 2-core machine: the harness at least 20x faster than
`mp.spawn` at 4 ranks, and a 4-rank harness call under 0.2 s. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist

TARGET_RATIO_AT_4 = 20.0
TARGET_CALL_S_AT_4 = 0.2


def harness_rank(ctx) -> float:
    """Rank function run by `harness.launch`: all-reduce a one-element tensor."""
    value = torch.ones(1)
    dist.all_reduce(value)
    return float(value.item())


def spawn_rank(rank: int, world_size: int, store_path: str) -> None:
    """Rank function run by `mp.spawn`: the same all-reduce, with its own process group."""
    torch.set_num_threads(1)
    store = dist.FileStore(store_path, world_size)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    try:
        value = torch.ones(1)
        dist.all_reduce(value)
        if value.item() != world_size:
            raise RuntimeError(f"rank {rank}: all-reduce gave {value.item()}, not {world_size}")
    finally:
        dist.destroy_process_group()


def time_harness_call(world_size: int, timeout: float) -> float:
    """Seconds for one `launch` call; checks the all-reduce result."""
    from harness import launch  # imported here so spawned children do not pay for it

    start = time.perf_counter()
    result = launch(harness_rank, world_size=world_size, backend="gloo", timeout=timeout)
    elapsed = time.perf_counter() - start
    if result.values != [float(world_size)] * world_size:
        raise RuntimeError(f"harness all-reduce gave {result.values}")
    return elapsed


def time_spawn_call(world_size: int) -> float:
    """Seconds for one `mp.spawn` call with a fresh FileStore process group."""
    with tempfile.TemporaryDirectory(prefix="mlsys-bench-") as tmp:
        start = time.perf_counter()
        torch.multiprocessing.spawn(
            spawn_rank, args=(world_size, os.path.join(tmp, "store")), nprocs=world_size,
            join=True,
        )
        return time.perf_counter() - start


def ratio_rows(medians: dict[int, tuple[float, float]]) -> list[list[str]]:
    """Table rows [ranks, harness s, spawn s, spawn/harness] from {ranks: (harness, spawn)}."""
    return [
        [str(n), f"{h:.3f}", f"{s:.3f}", f"{s / h:.1f}x" if h > 0 else "inf"]
        for n, (h, s) in sorted(medians.items())
    ]


def verdicts(medians: dict[int, tuple[float, float]]) -> list[str]:
    """One line per target, saying whether this run met it (4 ranks must have been measured)."""
    if 4 not in medians:
        return ["targets are stated at 4 ranks, which this run did not measure"]
    harness_s, spawn_s = medians[4]
    ratio = spawn_s / harness_s if harness_s > 0 else float("inf")
    met = {True: "met", False: "NOT met"}
    return [
        f"target: harness >= {TARGET_RATIO_AT_4:.0f}x faster than mp.spawn at 4 ranks: "
        f"{ratio:.1f}x ({met[ratio >= TARGET_RATIO_AT_4]})",
        f"target: a 4-rank harness call under {TARGET_CALL_S_AT_4} s: "
        f"{harness_s:.3f} s ({met[harness_s < TARGET_CALL_S_AT_4]})",
    ]


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m grader bench harness", description=__doc__
                                     .splitlines()[0])
    parser.add_argument("--ranks", default="2,4,8", help="world sizes, comma-separated")
    parser.add_argument("--runs", type=int, default=5, help="timed calls per side (default 5)")
    parser.add_argument("--timeout", type=float, default=120.0, help="per harness call, s")
    args = parser.parse_args(argv)
    args.ranks = [int(n) for n in args.ranks.split(",") if n.strip()]
    if args.runs < 1 or not args.ranks or min(args.ranks) < 1:
        parser.error("--runs and every --ranks entry must be positive")
    return args


def main(argv: list[str]) -> int:
    from grader.report.render import format_table

    args = _parse(argv)
    # The same thread and network settings the harness gives its ranks.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if os.path.isdir("/sys/class/net/lo"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    print(f"harness vs mp.spawn, trivial all-reduce; {os.cpu_count()} CPU(s); "
          f"median of {args.runs} call(s) per side", flush=True)
    first = time_harness_call(min(args.ranks), args.timeout)
    print(f"first harness call (starts the forkserver, not counted): {first:.3f} s", flush=True)
    medians: dict[int, tuple[float, float]] = {}
    for world_size in args.ranks:
        time_harness_call(world_size, args.timeout)  # warm-up at this size
        harness_s, spawn_s = [], []
        for _ in range(args.runs):
            harness_s.append(time_harness_call(world_size, args.timeout))
            spawn_s.append(time_spawn_call(world_size))
        medians[world_size] = (statistics.median(harness_s), statistics.median(spawn_s))
        h, s = medians[world_size]
        print(f"  {world_size} ranks: harness {h:.3f} s, mp.spawn {s:.3f} s", flush=True)
    print()
    print(format_table(["ranks", "harness (s)", "mp.spawn (s)", "spawn/harness"],
                       ratio_rows(medians)))
    print()
    print("\n".join(verdicts(medians)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

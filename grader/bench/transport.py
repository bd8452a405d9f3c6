"""Cost of the sidecar transport: in-rank gloo vs sidecars, per 4-rank launch and per MB moved.

Three kinds of call, timed alternately in one run so machine load hits them alike:
- `in-rank`: `launch(..., transport="in-rank")`, the ranks run gloo themselves;
- `sidecar`: `launch(..., transport="sidecar")`, every operation goes over a Unix socket to a
  per-rank sidecar that runs gloo outside the rank (harness/sidecar.py);
- `mp.spawn` (per launch only): fresh interpreters, as `grader bench harness` measures.
Per launch: a ring pass of one float (one send and one receive per rank). Per MB: a ring pass
of `--mb` MiB per rank, minus the per-launch time, divided by the MiB each rank sent.
Target (design principle 3): the harness stays at least 20x cheaper than mp.spawn per launch,
with either transport. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

from grader.bench.harness import time_spawn_call

TARGET_RATIO = 20.0
TRANSPORTS = ("in-rank", "sidecar")


def ring_pass(ctx, numel: int) -> float:
    """Rank function: send `numel` floats to the next rank, receive from the previous one."""
    rank, world = ctx.rank, ctx.world_size
    out, into = torch.full((numel,), float(rank)), torch.empty(numel)
    work = dist.isend(out, (rank + 1) % world)
    dist.recv(into, (rank - 1) % world)
    if work is not None:
        work.wait()
    return float(into[0])


def time_launch(world_size: int, numel: int, transport: str, timeout: float) -> float:
    from harness import launch

    start = time.perf_counter()
    result = launch(ring_pass, world_size, args=(numel,), backend="gloo", transport=transport,
                    timeout=timeout)
    elapsed = time.perf_counter() - start
    expected = [float((r - 1) % world_size) for r in range(world_size)]
    if result.values != expected:
        raise RuntimeError(f"{transport}: ring pass gave {result.values}")
    return elapsed


def main(argv: list[str]) -> int:
    from grader.report.render import format_table

    parser = argparse.ArgumentParser(prog="python -m grader bench transport",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--runs", type=int, default=5, help="timed calls per kind (default 5)")
    parser.add_argument("--mb", type=int, default=16, help="MiB each rank sends (default 16)")
    parser.add_argument("--spawn-runs", type=int, default=2, help="mp.spawn calls (default 2)")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if os.path.isdir("/sys/class/net/lo"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    n, numel = args.ranks, args.mb * 2**20 // 4
    for transport in TRANSPORTS:  # start the forkserver and the sidecar server: not counted
        time_launch(n, 1, transport, args.timeout)
    small: dict[str, list[float]] = {t: [] for t in TRANSPORTS}
    large: dict[str, list[float]] = {t: [] for t in TRANSPORTS}
    spawn: list[float] = []
    for i in range(args.runs):
        for transport in TRANSPORTS:
            small[transport].append(time_launch(n, 1, transport, args.timeout))
            large[transport].append(time_launch(n, numel, transport, args.timeout))
        if i < args.spawn_runs:
            spawn.append(time_spawn_call(n))
    spawn_s = statistics.median(spawn)
    rows = []
    for transport in TRANSPORTS:
        launch_s = statistics.median(small[transport])
        per_mb = max(0.0, statistics.median(large[transport]) - launch_s) / args.mb
        rows.append([transport, f"{launch_s:.3f}", f"{per_mb * 1e3:.1f}",
                     f"{spawn_s / launch_s:.1f}x"])
    print(f"{n}-rank ring pass, {os.cpu_count()} CPU(s), median of {args.runs} per kind; "
          f"mp.spawn {spawn_s:.2f} s per launch (median of {len(spawn)})")
    print(format_table(["transport", "per launch (s)", "per MiB sent (ms)", "vs mp.spawn"],
                       rows))
    worst = max(statistics.median(small[t]) for t in TRANSPORTS)
    verdict = "ok" if spawn_s / worst >= TARGET_RATIO else "MISSED"
    print(f"target: >= {TARGET_RATIO:.0f}x cheaper than mp.spawn per launch: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

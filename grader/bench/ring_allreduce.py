"""Ring all-reduce (the implementation under test) vs gloo's all_reduce: bus bandwidth and ratio.

Both run in the same harness launch on the same ranks, alternately, on float32 tensors of each
size (default 1M and 16M elements on 4 ranks), so machine load hits both alike. Per repetition
the time of a call is the slowest rank's (a collective is done when its last rank is), and the
median over repetitions is reported as

    algbw = bytes / time            bytes = 4 * numel
    busbw = algbw * 2 (N - 1) / N   (the bytes each rank's link actually carries; nccl-tests'
                                     convention, so numbers compare across N)

and the ratio ring busbw / gloo busbw. Printed, never asserted: on CPU both move bytes through
loopback TCP, so the ratio says how close the ring gets to gloo's tuned algorithm, not how
either would do on a GPU interconnect.

    python -m grader bench ring_allreduce [--impl solutions] [--world-size 4]
                                          [--sizes 1048576,16777216] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.distributed as dist

from grader.bench import add_impl_option

DEFAULT_SIZES = (1 << 20, 1 << 24)


def bench_rank(ctx, sizes: list[int], repeats: int, warmup: int) -> dict[str, list[list[float]]]:
    """Rank function: per size, the seconds of each ring and gloo call on this rank."""
    ring = ctx.impl_module("ring_allreduce", "ring")
    times: dict[str, list[list[float]]] = {}
    for numel in sizes:
        tensor = torch.empty(numel, dtype=torch.float32)
        ring_s: list[float] = []
        gloo_s: list[float] = []
        for repetition in range(warmup + repeats):
            for name, call, record in (("ring", ring.ring_all_reduce, ring_s),
                                       ("gloo", dist.all_reduce, gloo_s)):
                tensor.fill_(1.0)
                dist.barrier()  # start together: the slowest rank's time is the call's time
                start = time.perf_counter()
                call(tensor)
                elapsed = time.perf_counter() - start
                if repetition >= warmup:
                    record.append(elapsed)
                if float(tensor[0]) != float(ctx.world_size):
                    raise AssertionError(f"{name} all-reduce gave {float(tensor[0])}, "
                                         f"expected {ctx.world_size}")
        times[str(numel)] = [ring_s, gloo_s]
    return times


def _bus_bandwidth(numel: int, seconds: float, world_size: int) -> float:
    """GB/s carried per rank link (see the module docstring)."""
    algbw = 4 * numel / seconds / 1e9
    return algbw * 2 * (world_size - 1) / world_size


def _slowest(per_rank: list[list[float]]) -> list[float]:
    return [max(column) for column in zip(*per_rank)]


def _size_label(numel: int) -> str:
    return f"{numel >> 20}M" if numel % (1 << 20) == 0 else str(numel)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench ring_allreduce",
                                     description=__doc__.splitlines()[0])
    add_impl_option(parser)
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES),
                        help="comma-separated float32 element counts")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.world_size < 2 or args.repeats < 1 or not sizes:
        parser.error("need --world-size >= 2, --repeats >= 1 and at least one size")

    from harness import launch
    from harness.errors import LaunchError

    print(f"ring_allreduce bench: impl={args.impl.text}, {args.world_size} ranks, float32, "
          f"median of {args.repeats} (slowest rank per call)")
    try:
        result = launch(bench_rank, args.world_size, args=(sizes, args.repeats, args.warmup),
                        impl=args.impl, backend="gloo", timeout=args.timeout)
    except LaunchError as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    header = f"{'size':>6} {'ring ms':>9} {'gloo ms':>9} {'ring busbw':>11} " \
             f"{'gloo busbw':>11} {'ring/gloo':>10}"
    print(header)
    print("-" * len(header))
    for numel in sizes:
        per_rank = [value[str(numel)] for value in result.values]
        ring_s = statistics.median(_slowest([ring for ring, _ in per_rank]))
        gloo_s = statistics.median(_slowest([gloo for _, gloo in per_rank]))
        ring_bw = _bus_bandwidth(numel, ring_s, args.world_size)
        gloo_bw = _bus_bandwidth(numel, gloo_s, args.world_size)
        print(f"{_size_label(numel):>6} {ring_s * 1e3:>9.2f} {gloo_s * 1e3:>9.2f} "
              f"{ring_bw:>7.2f} GB/s {gloo_bw:>7.2f} GB/s {ring_bw / gloo_bw:>9.2f}x")
    print("busbw = bytes / time * 2(N-1)/N; ratio > 1 means the ring beats gloo.")
    return 0

"""ParallelMLP forward+backward on 1, 2, 4 ranks vs the dense MLP on one rank: time and memory.

One harness launch per world size p. Every rank builds the same dense MLP
down(gelu(up(x))) from one seed with plain torch, shards it with `ParallelMLP.from_dense`, and
then alternates, `--repeats` times after `--warmup`: a forward+backward of the dense MLP, then
one of the sharded MLP, each started together on every rank (barrier). The dense runs are the
single-rank baseline measured under the same load as the sharded ones, so the ratio

    time ratio   = sharded time / dense time      (slowest rank per repetition, then median)
    memory ratio = sharded parameter bytes per rank / dense parameter bytes

compares like with like. The ideal is 1/p for both; memory lands a little above it because
`down`'s bias is replicated. Each rank also checks its sharded output against the dense one.
Printed, never asserted: on a CPU the ranks share cores and talk over loopback, so the time
ratio says how communication and core sharing eat the speed-up, not what a GPU node would do.

    python -m grader bench tensor_parallel [--impl solutions] [--ranks 1,2,4]
        [--hidden 256] [--ffn 1024] [--tokens 512] [--repeats 5] [--backend auto]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from grader.bench import add_impl_option


def _timed(device: torch.device, step) -> float:
    """Seconds of `step()`, started after a barrier so every rank starts together."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()
    start = time.perf_counter()
    step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def bench_rank(ctx, cfg: dict) -> dict:
    """Rank function: dense and sharded timings, parameter bytes, and the output error."""
    from harness import storage_bytes

    tp = ctx.impl_module("tensor_parallel", "layers")
    dtype, device = getattr(torch, cfg["dtype"]), ctx.device
    torch.manual_seed(cfg["seed"])
    up = nn.Linear(cfg["hidden"], cfg["ffn"], dtype=dtype)
    down = nn.Linear(cfg["ffn"], cfg["hidden"], dtype=dtype)
    sharded = tp.ParallelMLP.from_dense(up, down).to(device)
    up, down = up.to(device), down.to(device)
    gen = torch.Generator().manual_seed(cfg["seed"] + 1)
    x = torch.randn(cfg["tokens"], cfg["hidden"], generator=gen, dtype=dtype).to(device)
    grad_y = torch.randn(cfg["tokens"], cfg["hidden"], generator=gen, dtype=dtype).to(device)
    dense_bytes, sharded_bytes = storage_bytes(up, down), storage_bytes(sharded)

    def dense_step():
        down(F.gelu(up(x))).backward(grad_y)

    def sharded_step():
        sharded(x).backward(grad_y)

    with torch.no_grad():
        error = float((sharded(x) - down(F.gelu(up(x)))).abs().max())
    x.requires_grad_()
    tensors = [x, *up.parameters(), *down.parameters(), *sharded.parameters()]
    dense_s: list[float] = []
    sharded_s: list[float] = []
    for repetition in range(cfg["warmup"] + cfg["repeats"]):
        for step, record in ((dense_step, dense_s), (sharded_step, sharded_s)):
            for t in tensors:
                t.grad = None
            elapsed = _timed(device, step)
            if repetition >= cfg["warmup"]:
                record.append(elapsed)
    return {"dense_s": dense_s, "sharded_s": sharded_s, "dense_bytes": dense_bytes,
            "sharded_bytes": sharded_bytes, "max_error": error}


def _slowest(per_rank: list[list[float]]) -> list[float]:
    return [max(column) for column in zip(*per_rank)]


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m grader bench tensor_parallel",
                                     description=__doc__.splitlines()[0])
    add_impl_option(parser)
    parser.add_argument("--ranks", default="1,2,4", help="world sizes, comma-separated")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--tokens", type=int, default=512, help="batch * seq")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"),
                        help="auto: NCCL when there is a GPU per rank for the largest world "
                             "size, else gloo (one choice for every row, so rows compare)")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    args.ranks = [int(n) for n in args.ranks.split(",") if n.strip()]
    if not args.ranks or min(args.ranks) < 1 or args.repeats < 1 or args.warmup < 0:
        parser.error("need positive --ranks, --repeats >= 1 and --warmup >= 0")
    bad = [p for p in args.ranks if args.ffn % p]
    if bad:
        parser.error(f"--ffn {args.ffn} is not divisible by the world size(s) {bad}")
    return args


def main(argv: list[str]) -> int:
    from grader.report.render import format_table
    from harness import launch
    from harness.errors import LaunchError

    args = _parse(argv)
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.device_count() >= max(args.ranks) else "gloo"
    cfg = {k: getattr(args, k) for k in ("hidden", "ffn", "tokens", "dtype", "repeats",
                                         "warmup", "seed")}
    print(f"tensor_parallel bench: impl={args.impl.text}, backend={backend}, MLP {args.hidden} -> "
          f"{args.ffn} -> {args.hidden}, {args.tokens} tokens, {args.dtype}; median of "
          f"{args.repeats} forward+backward (slowest rank per repetition)", flush=True)
    rows = []
    for world_size in args.ranks:
        try:
            result = launch(bench_rank, world_size, args=(cfg,), impl=args.impl,
                            backend=backend, timeout=args.timeout)
        except LaunchError as exc:
            print(f"error at {world_size} rank(s): {str(exc).splitlines()[0]}", file=sys.stderr)
            return 1
        values = result.values
        dense_s = statistics.median(_slowest([v["dense_s"] for v in values]))
        sharded_s = statistics.median(_slowest([v["sharded_s"] for v in values]))
        dense_bytes = values[0]["dense_bytes"]
        sharded_bytes = max(v["sharded_bytes"] for v in values)
        rows.append([world_size, f"{dense_s * 1e3:.2f}", f"{sharded_s * 1e3:.2f}",
                     f"{sharded_s / dense_s:.2f}x", f"{1 / world_size:.2f}x",
                     f"{sharded_bytes / 2**20:.2f}", f"{sharded_bytes / dense_bytes:.3f}x",
                     f"{max(v['max_error'] for v in values):.1e}"])
        print(f"  {world_size} rank(s): dense {dense_s * 1e3:.2f} ms, sharded "
              f"{sharded_s * 1e3:.2f} ms", flush=True)
    print()
    print(format_table(["ranks", "dense ms", "TP ms", "TP/dense time", "ideal",
                        "MiB/rank", "TP/dense memory", "max |Δ| vs dense"], rows))
    print("\nTP/dense < 1 means the sharded MLP is faster per step than one rank running the "
          "dense MLP;\nmemory is parameter bytes per rank (no gradients), ideal 1/p plus "
          "down's replicated bias.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""ZeRO-2 vs a DDP-style baseline on 4 ranks: per-step time and optimizer+gradient memory ratios.

    python -m grader bench zero2 [--impl solutions|assignments|DIR] [--world-size 4]
                                 [--steps 5] [--rounds 3] [--batch 64] [--width 1024]

Each rank builds two identical MLPs (about 4.3 million float32 parameters with the defaults):
one trained DDP-style (all-reduce of the flattened gradient, divide by N, full AdamW on every
rank), one with the `Zero2Optimizer` under test. Rounds alternate between the two on the same
batch, so both see the same machine load. Memory is measured inside the ranks right after a
step: full gradients plus AdamW state for DDP; for ZeRO-2 the inner optimizer's state, its
parameters (the master shard) and their gradients (the gradient shard), plus any `.grad` left on
the model. Prints ratios; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn

from grader.bench import add_impl_option


def _build(width: int, depth: int, out: int) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.Tanh()]
    return nn.Sequential(*layers, nn.Linear(width, out))


def _ddp_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
              y: torch.Tensor, world_size: int) -> None:
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world_size
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
    opt.step()


def _zero_step(model: nn.Module, opt, x: torch.Tensor, y: torch.Tensor) -> None:
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()


def _timed(fn, steps: int) -> float:
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    dist.barrier()
    return (time.perf_counter() - start) / steps


def rank_bench(ctx, width: int, depth: int, batch: int, steps: int, rounds: int) -> dict:
    from harness import storage_bytes

    zero = ctx.impl_module("zero2", "zero")
    out_features = 64
    ddp_model, zero_model = _build(width, depth, out_features), _build(width, depth, out_features)
    ddp_opt = torch.optim.AdamW(ddp_model.parameters(), lr=1e-4)
    zero_opt = zero.Zero2Optimizer(zero_model.parameters(), optimizer_class=torch.optim.AdamW,
                                   lr=1e-4)
    gen = torch.Generator().manual_seed(100 + ctx.rank)
    x = torch.randn(batch, width, generator=gen)
    y = torch.randn(batch, out_features, generator=gen)

    def ddp() -> None:
        _ddp_step(ddp_model, ddp_opt, x, y, ctx.world_size)

    def zero2() -> None:
        _zero_step(zero_model, zero_opt, x, y)

    ddp()
    zero2()  # warm-up; now measure memory as it stands between steps
    ddp_bytes = storage_bytes(ddp_opt, [p.grad for p in ddp_model.parameters()])
    inner = zero_opt.inner
    inner_params = [p for group in inner.param_groups for p in group["params"]]
    left = [p.grad for p in zero_model.parameters() if p.grad is not None]
    zero_bytes = storage_bytes(inner, inner_params, left)
    ddp_times, zero_times = [], []
    for _ in range(rounds):
        ddp_times.append(_timed(ddp, steps))
        zero_times.append(_timed(zero2, steps))
    diff = max(float((a - b).abs().max())
               for a, b in zip(ddp_model.parameters(), zero_model.parameters()))
    return {"ddp_times": ddp_times, "zero_times": zero_times, "ddp_bytes": ddp_bytes,
            "zero_bytes": zero_bytes, "max_diff": diff,
            "numel": sum(p.numel() for p in zero_model.parameters())}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench zero2",
                                     description=__doc__.splitlines()[0])
    add_impl_option(parser)
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--depth", type=int, default=4, help="hidden width x width layers")
    parser.add_argument("--batch", type=int, default=64, help="rows per rank")
    parser.add_argument("--steps", type=int, default=5, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)

    from harness import LaunchError, launch

    try:
        result = launch(rank_bench, world_size=args.world_size, impl=args.impl,
                        args=(args.width, args.depth, args.batch, args.steps, args.rounds),
                        timeout=args.timeout)
    except LaunchError as exc:
        print(f"zero2 benchmark failed: {str(exc).splitlines()[0]}")
        return 1
    values = result.values
    # A step ends when the slowest rank ends it: take the slowest rank per round.
    ddp_ms = statistics.median(max(v["ddp_times"][i] for v in values)
                               for i in range(args.rounds)) * 1e3
    zero_ms = statistics.median(max(v["zero_times"][i] for v in values)
                                for i in range(args.rounds)) * 1e3
    ddp_mb = max(v["ddp_bytes"] for v in values) / 1e6
    zero_mb = max(v["zero_bytes"] for v in values) / 1e6
    n, numel = args.world_size, values[0]["numel"]
    print(f"zero2 benchmark: {n} ranks ({result.backend}), MLP {args.depth} x {args.width}^2 "
          f"-> 64, P = {numel:,} float32 parameters, {args.batch} rows per rank, "
          f"impl = {args.impl.text}")
    print(f"{'':34}{'DDP (all-reduce)':>18}{'ZeRO-2':>12}{'ratio':>9}")
    print(f"{'step time, median of rounds (ms)':34}{ddp_ms:>18.1f}{zero_ms:>12.1f}"
          f"{zero_ms / ddp_ms:>9.2f}")
    print(f"{'optimizer + gradient memory (MB)':34}{ddp_mb:>18.1f}{zero_mb:>12.1f}"
          f"{zero_mb / ddp_mb:>9.2f}")
    print(f"expected memory ratio (4 + 4 + 8)/N / (4 + 8) = {16 / n / 12:.2f} "
          f"(gradient shard + master + m + v, against full gradient + m + v)")
    print(f"max |ZeRO-2 - DDP| over the parameters after {1 + args.steps * args.rounds} "
          f"identical steps: {max(v['max_diff'] for v in values):.2g} (0, or float32 rounding)")
    return 0

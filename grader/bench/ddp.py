"""DDP on 4 ranks: bucketed+overlapped vs one all-reduce per parameter vs one after backward.

    python -m grader bench ddp [--impl solutions|assignments|DIR] [--world-size 4]
                               [--width 1024] [--depth 6] [--batch 64] [--steps 3]
                               [--rounds 3] [--caps 0.25,1,4,25,1000] [--plot PATH]

Each rank builds identical MLPs (about 6.3 million float32 parameters with the defaults) and
trains them with SGD on the same batch, one per way of averaging the gradients:

- "bucketed": the `DistributedDataParallel` under test with `bucket_cap_mb=25` (the default):
  buckets in backward order, each all-reduced asynchronously as soon as it is full;
- "per parameter": the same wrapper with `bucket_cap_mb=0`, so every parameter is a bucket of
  its own: one all-reduce per parameter tensor, still overlapped;
- "after backward": no wrapper; after `backward()` returns, one all-reduce of all gradients
  flattened into one buffer (no overlap, one call);
- and a sweep of `bucket_cap_mb` over `--caps` (MiB) with the wrapper under test.

Rounds alternate between the variants on the same batch, so all see the same machine load;
the slowest rank's time of a round is that round's step time, and the median over rounds is
reported, as a ratio to "after backward". Prints a table and, when matplotlib is installed,
draws the sweep (step time against the bucket cap) to `--plot`
(default grading/bench/ddp_bucket_sweep.png). Asserts nothing about time: on a CPU with gloo
and two cores the overlap has little to hide behind; on GPUs with NCCL it is what DDP is for.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from grader.bench import add_impl_option

DEFAULT_PLOT = Path("grading") / "bench" / "ddp_bucket_sweep.png"


def _build(width: int, depth: int, out: int, device: torch.device) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.Tanh()]
    return nn.Sequential(*layers, nn.Linear(width, out)).to(device)


def _flat_after_backward(model: nn.Module, world_size: int) -> None:
    """The obvious alternative: wait for backward, then one all-reduce of everything."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world_size
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def rank_bench(ctx, width: int, depth: int, batch: int, steps: int, rounds: int,
               caps: list[float]) -> dict:
    ddp = ctx.impl_module("ddp", "ddp")
    device = ctx.device
    out_features = 64
    variants: dict[str, tuple[nn.Module, nn.Module]] = {}  # name -> (model, what to call)
    base = _build(width, depth, out_features, device)
    variants["after backward"] = (base, base)
    for name, cap in [("bucketed", 25.0), ("per parameter", 0.0)] + [
            (f"cap {c:g} MiB", c) for c in caps]:
        model = _build(width, depth, out_features, device)
        variants[name] = (model, ddp.DistributedDataParallel(model, bucket_cap_mb=cap))
    buckets = {name: len(wrapped.bucket_layout)  # type: ignore[arg-type]  # the student's DDP
               for name, (_, wrapped) in variants.items() if name != "after backward"}
    opts = {name: torch.optim.SGD(model.parameters(), lr=1e-3)
            for name, (model, _) in variants.items()}
    gen = torch.Generator().manual_seed(100 + ctx.rank)
    x = torch.randn(batch, width, generator=gen).to(device)
    y = torch.randn(batch, out_features, generator=gen).to(device)

    def step(name: str) -> None:
        model, call = variants[name]
        opts[name].zero_grad()
        ((call(x) - y) ** 2).mean().backward()
        if name == "after backward":
            _flat_after_backward(model, ctx.world_size)
        opts[name].step()

    for name in variants:  # warm-up
        step(name)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name in variants:
            _sync(device)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(steps):
                step(name)
            _sync(device)
            dist.barrier()
            times[name].append((time.perf_counter() - start) / steps)
    reference = variants["after backward"][0]
    diff = max(float((a - b).abs().max())
               for name, (model, _) in variants.items() if name != "after backward"
               for a, b in zip(model.parameters(), reference.parameters()))
    return {"times": times, "buckets": buckets, "max_diff": diff,
            "numel": sum(p.numel() for p in reference.parameters())}


def _plot(path: Path, caps: list[float], ms: list[float], after_ms: float,
          per_param_ms: float) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(caps, ms, marker="o", label="DistributedDataParallel(bucket_cap_mb=cap)")
    ax.axhline(after_ms, color="gray", linestyle="--", label="one all-reduce after backward")
    ax.axhline(per_param_ms, color="gray", linestyle=":", label="one all-reduce per parameter")
    ax.set_xscale("log")
    ax.set_xlabel("bucket cap (MiB)")
    ax.set_ylabel("step time (ms), median of rounds")
    ax.set_title("DDP step time against the bucket cap")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"sweep drawn to {path}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench ddp",
                                     description=__doc__.splitlines()[0])
    add_impl_option(parser)
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--depth", type=int, default=6, help="hidden width x width layers")
    parser.add_argument("--batch", type=int, default=64, help="rows per rank")
    parser.add_argument("--steps", type=int, default=3, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--caps", default="0.25,1,4,25,1000",
                        help="bucket caps of the sweep, MiB, comma-separated")
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    caps = [float(c) for c in args.caps.split(",") if c.strip()]

    from harness import LaunchError, launch

    try:
        result = launch(rank_bench, world_size=args.world_size, impl=args.impl,
                        args=(args.width, args.depth, args.batch, args.steps, args.rounds,
                              caps),
                        timeout=args.timeout)
    except LaunchError as exc:
        print(f"ddp benchmark failed: {str(exc).splitlines()[0]}")
        return 1
    values = result.values
    names = list(values[0]["times"])

    def median_ms(name: str) -> float:
        # A step ends when the slowest rank ends it: the slowest rank per round.
        return statistics.median(max(v["times"][name][i] for v in values)
                                 for i in range(args.rounds)) * 1e3

    ms = {name: median_ms(name) for name in names}
    after = ms["after backward"]
    buckets = values[0]["buckets"]
    print(f"ddp benchmark: {args.world_size} ranks ({result.backend}), MLP {args.depth} x "
          f"{args.width}^2 -> 64, P = {values[0]['numel']:,} float32 parameters "
          f"({values[0]['numel'] * 4 / 2**20:.1f} MiB of gradients), {args.batch} rows per "
          f"rank, impl = {args.impl.text}")
    print(f"{'variant':28}{'all-reduces':>12}{'step (ms)':>12}{'vs after backward':>19}")
    for name in names:
        calls = buckets.get(name, 1)
        print(f"{name:28}{calls:>12}{ms[name]:>12.1f}{ms[name] / after:>19.2f}")
    print(f"max |variant - after backward| over the parameters: {values[0]['max_diff']:.2g} "
          f"(float32 rounding of a different summation order, or 0)")
    sweep = [ms[f"cap {c:g} MiB"] for c in caps]
    print(_plot(args.plot, caps, sweep, after, ms["per parameter"]))
    return 0

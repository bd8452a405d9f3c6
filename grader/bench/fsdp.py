"""ZeRO-3 (yours, with and without resharding) and FSDP2 vs DDP on 4 ranks: step time and memory.

    python -m grader bench fsdp [--impl solutions|assignments|DIR] [--world-size 4]
                                [--width 512] [--blocks 8] [--batch 32] [--steps 3] [--rounds 3]

Each rank builds the same residual MLP (`blocks` blocks of one width x width linear layer, about
2.1 million float32 parameters with the defaults) once per variant: DDP (a full replica, one
all-reduce of the flattened gradient), your `Zero3` with `reshard_after_forward=True` and
`False` (one unit per block), and FSDP2 through your `shard_model` with FULL_SHARD,
SHARD_GRAD_OP and NO_SHARD. Rounds alternate between the variants, so they share the machine's
load. Memory: one extra probed step per variant records, at every block's forward and backward,
the bytes of live tensors (reachable from Python) of at least half a block's weights that did
not exist before the variant was built: full parameters (and gradient buffers Python holds),
not shards or activations. Prints the peak per step and time per
step as ratios to DDP, and draws the probed memory over one step
(grading/bench/fsdp_memory.png, when matplotlib is installed). Asserts nothing about time.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from grader.bench import add_impl_option

PICTURE = Path("grading") / "bench" / "fsdp_memory.png"
VARIANTS = ("DDP", "Zero3 reshard", "Zero3 keep", "FSDP2 FULL_SHARD", "FSDP2 SHARD_GRAD_OP",
            "FSDP2 NO_SHARD")


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        update = self.fc(x).tanh()
        return x + update


class Net(nn.Module):
    def __init__(self, width: int, blocks: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(width) for _ in range(blocks)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def _large_storages(threshold: int) -> dict[int, int]:
    seen = {}
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor):
            try:
                storage = obj.untyped_storage()
                if storage.nbytes() >= threshold:
                    seen[storage.data_ptr()] = storage.nbytes()
            except (RuntimeError, NotImplementedError):
                continue  # no storage (e.g. a DTensor wrapper) or one already released
    return seen


def _ddp_step(model: nn.Module, opt, x, y, world_size: int) -> None:
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world_size
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
    opt.step()


def _plain_step(model: nn.Module, opt, x, y) -> None:
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()


def rank_bench(ctx, width: int, blocks: int, batch: int, steps: int, rounds: int) -> dict:
    zero3 = ctx.impl_module("fsdp", "zero3")
    fsdp2 = ctx.impl_module("fsdp", "fsdp2")
    gen = torch.Generator().manual_seed(100 + ctx.rank)
    x, y = torch.randn(batch, width, generator=gen), torch.randn(batch, width, generator=gen)
    threshold = (width * width * 4) // 2

    def build() -> Net:
        torch.manual_seed(0)
        return Net(width, blocks)

    def make(name: str):
        model = build()
        if name == "DDP":
            wrapped = model
        elif name.startswith("Zero3"):
            wrapped = zero3.Zero3(model, list(model.blocks),
                                  reshard_after_forward=name.endswith("reshard"))
        else:
            wrapped = fsdp2.shard_model(model, name.split()[1])
        opt = torch.optim.SGD(wrapped.parameters(), lr=1e-3)
        if name == "DDP":
            def step() -> None:
                _ddp_step(wrapped, opt, x, y, ctx.world_size)
        else:
            def step() -> None:
                _plain_step(wrapped, opt, x, y)
        return model, step

    # Memory, one variant at a time (the others not built), counting only storages that did
    # not exist before the variant was built: its full weights and gradients, never a shard.
    memory = {}
    for name in VARIANTS:
        gc.collect()
        before = _large_storages(threshold)
        model, step = make(name)
        step()  # warm-up
        trace: list[int] = []

        def probe(*_, trace=trace, before=before) -> None:
            now = _large_storages(threshold)
            trace.append(sum(n for ptr, n in now.items() if ptr not in before))

        hooks = []
        for block in model.blocks:
            hooks.append(block.fc.register_forward_pre_hook(probe))
            hooks.append(block.fc.register_full_backward_pre_hook(probe))
        step()
        for h in hooks:
            h.remove()
        memory[name] = trace
        del model, step, hooks

    runs = {name: make(name) for name in VARIANTS}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, (_, step) in runs.items():
            dist.barrier()
            start = time.perf_counter()
            for _ in range(steps):
                step()
            dist.barrier()
            times[name].append((time.perf_counter() - start) / steps)
    return {"times": times, "memory": memory,
            "numel": sum(p.numel() for p in build().parameters())}


def plot(memory: dict[str, list[int]], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, trace in memory.items():
        ax.plot(range(len(trace)), [b / 1e6 for b in trace], "o-", markersize=3, label=name)
    half = len(next(iter(memory.values()))) // 2
    ax.axvline(half - 0.5, color="grey", linestyle=":")
    ax.text(half - 0.5, ax.get_ylim()[1] * 0.95, " backward", color="grey")
    ax.set_xlabel("probe point (each block's forward, then each block's backward)")
    ax.set_ylabel("block-sized tensors alive (MB)")
    ax.set_title("Memory over one step, rank 0")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot: {path}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench fsdp",
                                     description=__doc__.splitlines()[0])
    add_impl_option(parser)
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32, help="rows per rank")
    parser.add_argument("--steps", type=int, default=3, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)

    from harness import LaunchError, launch

    try:
        result = launch(rank_bench, world_size=args.world_size, impl=args.impl, backend="gloo",
                        args=(args.width, args.blocks, args.batch, args.steps, args.rounds),
                        timeout=args.timeout)
    except LaunchError as exc:
        print(f"fsdp benchmark failed: {str(exc).splitlines()[0]}")
        return 1
    values = result.values
    ms = {name: statistics.median(max(v["times"][name][i] for v in values)
                                  for i in range(args.rounds)) * 1e3 for name in VARIANTS}
    peak = {name: max(max(v["memory"][name]) for v in values) / 1e6 for name in VARIANTS}
    n, numel = args.world_size, values[0]["numel"]
    print(f"fsdp benchmark: {n} ranks ({result.backend}), {args.blocks} blocks of "
          f"{args.width}x{args.width}, P = {numel:,} float32 parameters, {args.batch} rows per "
          f"rank, impl = {args.impl.text}")
    print(f"{'variant':22}{'step (ms)':>11}{'x DDP':>8}{'peak full tensors alive (MB)':>30}"
          f"{'x DDP':>8}")
    for name in VARIANTS:
        print(f"{name:22}{ms[name]:>11.1f}{ms[name] / ms['DDP']:>8.2f}{peak[name]:>30.1f}"
              f"{peak[name] / peak['DDP']:>8.2f}")
    block_mb = (args.width * args.width + args.width) * 4 / 1e6
    print(f"one block's full weights: {block_mb:.2f} MB; all of them {numel * 4 / 1e6:.1f} MB. "
          f"Memory counts the block-sized tensors Python can reach (not gradients autograd "
          f"holds only in C++), created by the variant: DDP's replica; resharding ZeRO-3 about "
          f"one block; without resharding every block by the end of forward; FSDP2 adds "
          f"prefetching and its own gradient buffers.")
    print(plot(values[0]["memory"], PICTURE))
    return 0

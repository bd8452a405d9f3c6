"""GPipe vs 1F1B on 4 ranks: step time, peak activation memory, and a timeline of the bubble.

One harness launch of `--ranks` ranks (4 by default). Each rank builds its stage, `--layers`
Linear + tanh layers of width `--width`, from one seed, and then alternates, `--repeats` times
after `--warmup`: a `train_step` under GPipe, then one under 1F1B, each started together on
every rank (barrier). Both schedules run under the same load, so the ratios

    time ratio   = 1F1B step time / GPipe step time      (slowest rank per repetition, median)
    memory ratio = 1F1B peak saved-activation bytes / GPipe's      (per stage)

compare like with like: about 1 for time (1F1B does not shrink the bubble), about
min(m, p - s)/m for memory. Memory is counted by saved-tensor hooks around each call (bytes of
the tensors autograd saved in the stage's forward and still holds), not by the allocator.

The last repetition of each schedule also records, on every stage, when each forward and each
backward of `stage_module` started and ended (module hooks; all ranks share the host's
monotonic clock). Those spans are drawn into a PNG (`--plot`, default
grading/bench/pipeline_timeline.png): one row per stage, forwards and backwards as bars, the
gaps are the bubble, and the measured idle fraction is printed beside (p-1)/(m+p-1). Printed,
never asserted: on a CPU the ranks share cores, so the time ratio and the picture's proportions
are rough; on a GPU node they are what a real pipeline does.

    python -m grader bench pipeline [--impl solutions] [--ranks 4] [--microbatches 8]
        [--width 1024] [--layers 2] [--rows 1024] [--repeats 3] [--plot PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from grader.bench import add_impl_option

DEFAULT_PLOT = Path("grading/bench/pipeline_timeline.png")
KINDS = ("gpipe", "1f1b")


def bench_rank(ctx, cfg: dict) -> dict:
    """Rank function: per schedule, step times, peak saved bytes, and the last step's spans."""
    import weakref

    import torch.nn.functional as F
    from torch import nn

    pl = ctx.impl_module("pipeline", "pipeline")
    s, p = ctx.rank, ctx.world_size
    torch.manual_seed(cfg["seed"] + s)
    layers = []
    for _ in range(cfg["layers"]):
        layers += [nn.Linear(cfg["width"], cfg["width"]), nn.Tanh()]
    stage = nn.Sequential(*layers)
    optimizer = torch.optim.SGD(stage.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(cfg["seed"])
    batch = torch.randn(cfg["rows"], cfg["width"], generator=gen)
    targets = torch.randn(cfg["rows"], cfg["width"], generator=gen)
    m = cfg["microbatches"]

    spans: list[tuple[str, float, float]] = []
    opened: dict[str, float] = {}
    stage.register_forward_pre_hook(lambda mod, args: opened.__setitem__("F", time.monotonic()))
    stage.register_forward_hook(
        lambda mod, args, out: spans.append(("F", opened["F"], time.monotonic())))
    stage.register_full_backward_pre_hook(
        lambda mod, grad_out: opened.__setitem__("B", time.monotonic()))
    # A backward ends when the last parameter's gradient has been accumulated (the module's
    # own backward hook fires before the weight gradients of the first layer are done).
    params = list(stage.parameters())
    pending = {"left": len(params)}

    def accumulated(_param) -> None:
        pending["left"] -= 1
        if not pending["left"]:
            spans.append(("B", opened["B"], time.monotonic()))
            pending["left"] = len(params)

    for param in params:
        param.register_post_accumulate_grad_hook(accumulated)

    memory = {"live": 0, "peak": 0}

    class Held:
        __slots__ = ("tensor", "__weakref__")

        def __init__(self, tensor: torch.Tensor) -> None:
            self.tensor = tensor

    def release(nbytes: int) -> None:
        memory["live"] -= nbytes

    def pack(t: torch.Tensor):
        held = Held(t)
        memory["live"] += t.numel() * t.element_size()
        memory["peak"] = max(memory["peak"], memory["live"])
        weakref.finalize(held, release, t.numel() * t.element_size())
        return held

    def unpack(held):
        return held.tensor

    def step(kind: str) -> tuple[float, int, list, float]:
        spans.clear()
        memory["live"] = memory["peak"] = 0
        dist.barrier()
        start = time.monotonic()
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            pl.train_step(stage, optimizer, kind=kind, num_microbatches=m,
                          in_shape=(cfg["rows"] // m, cfg["width"]),
                          batch=batch if s == 0 else None,
                          targets=targets if s == p - 1 else None,
                          loss_fn=F.mse_loss if s == p - 1 else None, dtype=torch.float32)
        end = time.monotonic()
        return end - start, memory["peak"], list(spans), start

    out: dict = {kind: {"seconds": [], "peak": 0, "spans": [], "start": 0.0} for kind in KINDS}
    for repetition in range(cfg["warmup"] + cfg["repeats"]):
        for kind in KINDS:
            seconds, peak, kind_spans, start = step(kind)
            if repetition >= cfg["warmup"]:
                out[kind]["seconds"].append(seconds)
                out[kind]["peak"] = max(out[kind]["peak"], peak)
                out[kind]["spans"], out[kind]["start"] = kind_spans, start
    return out


def _slowest(per_rank: list[list[float]]) -> list[float]:
    return [max(column) for column in zip(*per_rank)]


def _timeline(values: list[dict], kind: str) -> tuple[float, list[list[tuple[str, float, float]]]]:
    """(step length, per-stage spans) of the last step, in seconds from the earliest start."""
    zero = min(v[kind]["start"] for v in values)
    rows = [[(op, a - zero, b - zero) for op, a, b in v[kind]["spans"]] for v in values]
    end = max((b for row in rows for _, _, b in row), default=0.0)
    return end, rows


def _idle(end: float, row: list[tuple[str, float, float]]) -> float:
    return 1.0 - sum(b - a for _, a, b in row) / end if end > 0 else 0.0


def _plot(path: Path, timelines: dict, p: int, m: int) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    fig, axes = plt.subplots(len(timelines), 1, figsize=(11, 1.2 + 0.55 * p * len(timelines)),
                             squeeze=False)
    colors = {"F": "#4C72B0", "B": "#DD8452"}
    for ax, (kind, (end, rows)) in zip(axes[:, 0], timelines.items()):
        for s, row in enumerate(rows):
            for op, a, b in row:
                ax.broken_barh([(a * 1e3, (b - a) * 1e3)], (s - 0.4, 0.8), color=colors[op])
        ax.set_yticks(range(p), [f"stage {s}" for s in range(p)])
        ax.invert_yaxis()
        ax.set_xlim(0, end * 1e3)
        idle = statistics.mean(_idle(end, row) for row in rows)
        ax.set_title(f"{kind}: p={p}, m={m}; measured idle {idle:.0%}, "
                     f"(p-1)/(m+p-1) = {(p - 1) / (m + p - 1):.0%} (blue F, orange B, gaps idle)")
        ax.set_xlabel("ms since the step began")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"timeline written to {path}"


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m grader bench pipeline",
                                     description=__doc__.splitlines()[0])
    add_impl_option(parser)
    parser.add_argument("--ranks", type=int, default=4, help="pipeline stages (world size)")
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=2, help="Linear+tanh layers per stage")
    parser.add_argument("--rows", type=int, default=1024, help="batch rows (divisible by m)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    if args.ranks < 2 or args.repeats < 1 or args.warmup < 0 or args.microbatches < 1:
        parser.error("need --ranks >= 2, --microbatches >= 1, --repeats >= 1, --warmup >= 0")
    if args.rows % args.microbatches:
        parser.error(f"--rows {args.rows} is not divisible by --microbatches {args.microbatches}")
    return args


def main(argv: list[str]) -> int:
    from grader.report.render import format_table
    from harness import launch
    from harness.errors import LaunchError

    args = _parse(argv)
    cfg = {k: getattr(args, k) for k in ("microbatches", "width", "layers", "rows", "repeats",
                                         "warmup", "seed")}
    p, m = args.ranks, args.microbatches
    print(f"pipeline bench: impl={args.impl.text}, {p} stages of {args.layers} x Linear("
          f"{args.width}) + tanh, {args.rows} rows in {m} micro-batches, float32, gloo; median "
          f"of {args.repeats} steps (slowest rank per step)", flush=True)
    try:
        result = launch(bench_rank, p, args=(cfg,), impl=args.impl, backend="gloo",
                        timeout=args.timeout)
    except LaunchError as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    values = result.values
    step = {k: statistics.median(_slowest([v[k]["seconds"] for v in values])) for k in KINDS}
    timelines = {k: _timeline(values, k) for k in KINDS}
    rows = []
    for s in range(p):
        gpipe, f1b = values[s]["gpipe"]["peak"], values[s]["1f1b"]["peak"]
        rows.append([s, f"{gpipe / 2**20:.2f}", f"{f1b / 2**20:.2f}",
                     f"{f1b / gpipe:.2f}x" if gpipe else "-", f"{min(m, p - s) / m:.2f}x",
                     f"{_idle(*_row(timelines['gpipe'], s)):.0%}",
                     f"{_idle(*_row(timelines['1f1b'], s)):.0%}"])
    print()
    print(format_table(["stage", "GPipe MiB", "1F1B MiB", "1F1B/GPipe memory", "ideal",
                        "GPipe idle", "1F1B idle"], rows))
    print(f"\nstep time: GPipe {step['gpipe'] * 1e3:.1f} ms, 1F1B {step['1f1b'] * 1e3:.1f} ms, "
          f"1F1B/GPipe {step['1f1b'] / step['gpipe']:.2f}x (ideal 1.00x: same bubble); "
          f"(p-1)/(m+p-1) = {(p - 1) / (m + p - 1):.0%}")
    print("memory: peak bytes autograd saved in the stage's forwards and still held; idle: "
          "share of the last step with no forward or backward of the stage running")
    print(_plot(args.plot, timelines, p, m))
    return 0


def _row(timeline: tuple[float, list], s: int) -> tuple[float, list]:
    end, rows = timeline
    return end, rows[s]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

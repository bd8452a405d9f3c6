"""MoELayer on 4 ranks vs the dense MLP of equal FLOPs: time, all-to-all bytes, tokens per expert.

Part 1, one harness launch of `--ranks` ranks. Every rank builds the same dense MoE (E SwiGLU
experts of width F, top-k, no capacity) from one seed, keeps its E/N experts with
`MoELayer.from_dense`, and builds the dense-equivalent MLP: one SwiGLU of width k*F, which
spends the same FLOPs per token as the k experts a token visits. It then alternates, `--repeats`
times after `--warmup`, a forward+backward of the dense MLP and one of the MoE layer on its own
`--tokens` tokens, each started together on every rank (barrier), so

    time ratio = MoE time / dense-equivalent time   (slowest rank per repetition, then median)

says what routing, permuting and four all-to-alls cost next to the same matmuls. One more step
runs with the communication log cleared: the bytes the token all-to-alls carried (their input
buffers, forward and backward) are compared with the formula 4 * k * T * H * bytes (every
routed row, this rank's own share included, nothing dropped, as many rows received as sent).

Part 2, one launch of 1 rank: a small MoE (all experts local) learns a random teacher MoE from a
router that starts skewed, once with the task loss only and once with 0.05 x the
load-balancing loss added; the tokens each expert receives on a held-out batch, before and after
both trainings, go to a bar chart (grading/bench/moe_tokens_per_expert.png, when matplotlib
is installed) and a table.

Printed, never asserted: on a CPU the ranks share cores and talk over loopback.

    python -m grader bench moe [--impl solutions] [--ranks 4] [--experts 8] [--k 2]
        [--hidden 256] [--ffn 512] [--tokens 1024] [--repeats 5] [--steps 150]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from grader.bench import add_impl_option

PICTURE = Path("grading") / "bench" / "moe_tokens_per_expert.png"


def _dense_params(cfg: dict, gen: torch.Generator) -> dict[str, torch.Tensor]:
    e, h, f = cfg["experts"], cfg["hidden"], cfg["ffn"]

    def u(*shape: int, fan_in: int) -> torch.Tensor:
        return (torch.rand(*shape, generator=gen) * 2 - 1) / fan_in ** 0.5

    return {"router": u(e, h, fan_in=h), "w_gate": u(e, f, h, fan_in=h),
            "w_up": u(e, f, h, fan_in=h), "w_down": u(e, h, f, fan_in=f)}


def _timed(step) -> float:
    dist.barrier()
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def bench_rank(ctx, cfg: dict) -> dict:
    """Rank function of part 1: both timings and the all-to-all bytes of one step."""
    m = ctx.impl_module("moe", "moe")
    gen = torch.Generator().manual_seed(cfg["seed"])
    p = _dense_params(cfg, gen)
    layer = m.MoELayer.from_dense(p["router"], p["w_gate"], p["w_up"], p["w_down"],
                                  k=cfg["k"])
    width = cfg["k"] * cfg["ffn"]
    dense = {"gate": torch.randn(width, cfg["hidden"], generator=gen) / cfg["hidden"] ** 0.5,
             "up": torch.randn(width, cfg["hidden"], generator=gen) / cfg["hidden"] ** 0.5,
             "down": torch.randn(cfg["hidden"], width, generator=gen) / width ** 0.5}
    for t in dense.values():
        t.requires_grad_()
    local = torch.Generator().manual_seed(cfg["seed"] + 1 + ctx.rank)
    x = torch.randn(cfg["tokens"], cfg["hidden"], generator=local).requires_grad_()
    grad_y = torch.randn(cfg["tokens"], cfg["hidden"], generator=local)
    params = [x, *dense.values(), *layer.parameters()]

    def dense_step():
        h = F.silu(x @ dense["gate"].t()) * (x @ dense["up"].t())
        (h @ dense["down"].t()).backward(grad_y)

    def moe_step():
        y, _ = layer(x)
        y.backward(grad_y)

    dense_s: list[float] = []
    moe_s: list[float] = []
    for repetition in range(cfg["warmup"] + cfg["repeats"]):
        for step, record in ((dense_step, dense_s), (moe_step, moe_s)):
            for t in params:
                t.grad = None
            elapsed = _timed(step)
            if repetition >= cfg["warmup"]:
                record.append(elapsed)
    ctx.clear_comm_log()
    moe_step()
    float_a2a = [r for r in ctx.comm_log() if r.op == "all_to_all_single"
                 and "int" not in r.dtype]
    return {"dense_s": dense_s, "moe_s": moe_s, "a2a_calls": len(float_a2a),
            "a2a_bytes": sum(r.bytes for r in float_a2a),
            "element_size": x.element_size()}


def train_rank(ctx, cfg: dict) -> dict:
    """Rank function of part 2 (one rank): tokens per expert before and after training a
    skewed router with and without the load-balancing loss."""
    m = ctx.impl_module("moe", "moe")
    e, h, k = cfg["experts"], cfg["train_hidden"], cfg["k"]
    gen = torch.Generator().manual_seed(cfg["seed"] + 100)
    teacher = _dense_params({**cfg, "hidden": h, "ffn": 2 * h}, gen)
    start = _dense_params({**cfg, "hidden": h, "ffn": 2 * h}, gen)
    # A skewed start: a shared input direction that favours the first two experts.
    direction = torch.randn(h, generator=gen)
    direction /= direction.norm()
    start["router"][:2] += 3.0 * direction
    teacher_layer = m.MoELayer.from_dense(teacher["router"], teacher["w_gate"],
                                          teacher["w_up"], teacher["w_down"], k=k)

    def batch(g: torch.Generator) -> torch.Tensor:
        return torch.randn(cfg["train_tokens"], h, generator=g) + 1.5 * direction

    held_out = batch(torch.Generator().manual_seed(cfg["seed"] + 200))

    def tokens_per_expert(layer) -> list[int]:
        with torch.no_grad():
            _, experts, _ = m.route(layer.router(held_out), k)
        return torch.bincount(experts.reshape(-1), minlength=e).tolist()

    out = {}
    for name, coefficient in (("task loss only", 0.0), ("with balancing loss", 0.05)):
        layer = m.MoELayer.from_dense(start["router"], start["w_gate"], start["w_up"],
                                      start["w_down"], k=k)
        out["start"] = tokens_per_expert(layer)
        opt = torch.optim.Adam(layer.parameters(), lr=cfg["lr"])
        data_gen = torch.Generator().manual_seed(cfg["seed"] + 300)
        for _ in range(cfg["steps"]):
            x = batch(data_gen)
            with torch.no_grad():
                target, _ = teacher_layer(x)
            y, logits = layer(x)
            loss = F.mse_loss(y, target)
            if coefficient:
                _, experts, probs = m.route(logits, k)
                loss = loss + coefficient * m.load_balancing_loss(probs, experts)
            opt.zero_grad()
            loss.backward()
            opt.step()
        out[name] = tokens_per_expert(layer)
    return out


def _slowest(per_rank: list[list[float]]) -> list[float]:
    return [max(column) for column in zip(*per_rank)]


def _picture(counts: dict[str, list[int]], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no picture"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = list(counts)
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        xs = [e + (i - (len(names) - 1) / 2) * width for e in range(len(counts[name]))]
        ax.bar(xs, counts[name], width=width, label=name)
    total = sum(counts[names[0]])
    ax.axhline(total / len(counts[names[0]]), color="black", linewidth=0.8, linestyle="--",
               label="perfect balance")
    ax.set_xlabel("expert")
    ax.set_ylabel("assignments on a held-out batch")
    ax.set_title("Tokens per expert, without and with the balancing loss")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"picture: {path}"


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m grader bench moe",
                                     description=__doc__.splitlines()[0])
    add_impl_option(parser)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--ffn", type=int, default=512)
    parser.add_argument("--tokens", type=int, default=1024, help="tokens per rank")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=150, help="training steps of part 2")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    if args.experts % args.ranks or not 1 <= args.k <= args.experts or args.repeats < 1:
        parser.error("need --experts divisible by --ranks, 1 <= --k <= --experts, --repeats >= 1")
    return args


def main(argv: list[str]) -> int:
    from grader.report.render import format_table
    from harness import launch
    from harness.errors import LaunchError

    args = _parse(argv)
    cfg = {k: getattr(args, k) for k in ("experts", "k", "hidden", "ffn", "tokens", "repeats",
                                         "warmup", "seed", "steps")}
    cfg.update(train_hidden=32, train_tokens=512, lr=3e-3)
    print(f"moe bench: impl={args.impl.text}, {args.ranks} ranks (gloo), {args.experts} experts "
          f"top-{args.k}, H={args.hidden}, F={args.ffn}, {args.tokens} tokens per rank, "
          f"float32; median of {args.repeats} forward+backward (slowest rank)", flush=True)
    try:
        result = launch(bench_rank, args.ranks, args=(cfg,), impl=args.impl, backend="gloo",
                        timeout=args.timeout)
        trained = launch(train_rank, 1, args=(cfg,), impl=args.impl, backend="gloo",
                         timeout=args.timeout).values[0]
    except LaunchError as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    values = result.values
    dense_s = statistics.median(_slowest([v["dense_s"] for v in values]))
    moe_s = statistics.median(_slowest([v["moe_s"] for v in values]))
    formula = 4 * args.k * args.tokens * args.hidden * values[0]["element_size"]
    rows = [[r, v["a2a_calls"], f"{v['a2a_bytes'] / 2**20:.2f}", f"{formula / 2**20:.2f}",
             f"{v['a2a_bytes'] / formula:.3f}x"] for r, v in enumerate(values)]
    print()
    print(format_table(["", "dense-equivalent ms", "MoE ms", "MoE / dense"],
                       [["time", f"{dense_s * 1e3:.2f}", f"{moe_s * 1e3:.2f}",
                         f"{moe_s / dense_s:.2f}x"]]))
    print()
    print(format_table(["rank", "token all-to-alls", "MiB carried (fwd+bwd)",
                        "formula 4kTHb MiB", "measured / formula"], rows))
    print(f"\nThe formula counts k*T rows out and k*T rows in per all-to-all pair; a rank "
          f"carries more or less\nas its experts receive more or fewer rows than it sends. Of "
          f"the rows, (N-1)/N = {(args.ranks - 1) / args.ranks:.2f} leave the\nrank under "
          f"balanced routing; the rest is each rank's split to itself.")
    counts = {"skewed start": trained["start"], "task loss only": trained["task loss only"],
              "with balancing loss": trained["with balancing loss"]}
    print()
    print(format_table(["router", *[f"e{i}" for i in range(args.experts)], "max / mean"],
                       [[name, *c, f"{max(c) / (sum(c) / len(c)):.2f}"]
                        for name, c in counts.items()]))
    print("\n" + _picture(counts, PICTURE))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Speculative decoding: measured tokens per target forward against (1 - a^(k+1)) / (1 - a).

Everything runs in one harness rank with the implementation under test (`--impl`):

1. Tokens per target forward. For each acceptance rate alpha of `--alphas`, a pair of constant
   models (provided `ConstantLM`) whose distributions overlap by exactly alpha generates
   `--tokens` tokens with `speculative_generate` for every k of `--ks`; the table puts the
   measured tokens per round (one target forward each) beside the formula, with the measured
   acceptance accepted / (accepted + rejected). The last rounds are capped by max_new_tokens,
   so the measured values sit slightly under the formula for short runs.
2. The speed-up at a draft cost of `--draft-cost` target forwards per draft token, from the
   measured tokens per round, and the best k per alpha.
3. A plot of both (measured points, formula curves) to `--plot` when matplotlib is installed.

Printed, never asserted.

    python -m grader bench speculative [--impl solutions] [--tokens 2000] [--quick]
                                       [--alphas 0.6,0.8,0.9] [--ks 1,2,3,4,5,6,7,8]
                                       [--draft-cost 0.114] [--plot PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.bench import add_impl_option

DEFAULT_PLOT = Path("grading") / "bench" / "speculative_tokens_per_forward.png"


def formula(alpha: float, k: int) -> float:
    return float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def overlapping(alpha: float, vocab: int = 8) -> tuple[list[float], list[float]]:
    """Logits of p and q with sum min(p, q) = alpha: q mixes p with a point mass on the token
    p makes least likely, lam * p + (1 - lam) * e_j, which overlaps p by lam (1 - p_j) + p_j."""
    import torch

    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(vocab, generator=gen, dtype=torch.float64), 0)
    j = int(torch.argmin(p))
    lam = (alpha - float(p[j])) / (1 - float(p[j]))
    q = lam * p
    q[j] += 1 - lam
    return p.log().tolist(), q.log().tolist()


def bench_rank(ctx, cfg: dict) -> dict:
    import torch

    from assignments.speculative.lm import ConstantLM

    spec = ctx.impl_module("speculative", "speculative")
    rows = []
    for alpha in cfg["alphas"]:
        p_logits, q_logits = overlapping(alpha)
        for k in cfg["ks"]:
            target, draft = ConstantLM(torch.tensor(p_logits)), ConstantLM(torch.tensor(q_logits))
            gen = torch.Generator().manual_seed(k)
            tokens, stats = spec.speculative_generate(target, draft, torch.tensor([0]), k,
                                                      cfg["tokens"], 1.0, gen)
            examined = stats["accepted"] + stats["rejected"]
            rows.append({"alpha": alpha, "k": k, "tokens": int(tokens.numel()),
                         "rounds": int(stats["rounds"]),
                         "alpha_measured": stats["accepted"] / examined if examined else 0.0})
    return {"rows": rows}


def _plot(path: Path, rows: list[dict], alphas: list[float], ks: list[int]) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    for alpha in alphas:
        mine = [r for r in rows if r["alpha"] == alpha]
        line = ax.plot(ks, [formula(alpha, k) for k in ks], linestyle="--",
                       label=f"formula, alpha={alpha}")
        ax.plot([r["k"] for r in mine], [r["tokens"] / r["rounds"] for r in mine], marker="o",
                linestyle="", color=line[0].get_color(), label=f"measured, alpha={alpha}")
    ax.set_xlabel("draft tokens per round, k")
    ax.set_ylabel("tokens per target forward")
    ax.set_title("Speculative decoding: measured against (1 - a^(k+1)) / (1 - a)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"drawn to {path}"


def report(cfg: dict, rows: list[dict]) -> None:
    c = cfg["draft_cost"]
    print(f"{'alpha':>5} {'k':>2} {'measured a':>10} {'tokens/fwd':>10} {'formula':>8} "
          f"{'ratio':>6} {'speed-up at c=' + format(c, '.3g'):>16}")
    best: dict[float, tuple[float, int]] = {}
    for r in rows:
        measured = r["tokens"] / r["rounds"]
        want = formula(r["alpha"], r["k"])
        speed = measured / (1 + r["k"] * c)
        if speed > best.get(r["alpha"], (0.0, 0))[0]:
            best[r["alpha"]] = (speed, r["k"])
        print(f"{r['alpha']:5.2f} {r['k']:2d} {r['alpha_measured']:10.3f} {measured:10.3f} "
              f"{want:8.3f} {measured / want:6.3f} {speed:16.3f}")
    for alpha, (speed, k) in best.items():
        print(f"alpha={alpha}: best k = {k} (speed-up {speed:.2f} at draft cost {c:.3g})")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench speculative",
                                     description=__doc__.splitlines()[0])
    add_impl_option(parser)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="300 tokens, k in 1, 2, 4, 8")
    parser.add_argument("--alphas", default="0.6,0.8,0.9")
    parser.add_argument("--ks", default="1,2,3,4,5,6,7,8")
    parser.add_argument("--draft-cost", type=float, default=16 / 140)
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    alphas = [float(a) for a in args.alphas.split(",")]
    ks = [1, 2, 4, 8] if args.quick else [int(k) for k in args.ks.split(",")]
    tokens = 300 if args.quick else args.tokens
    if tokens < 1 or min(ks) < 0 or not all(0 < a < 1 for a in alphas):
        parser.error("need --tokens >= 1, k >= 0 and 0 < alpha < 1")
    cfg = {"alphas": alphas, "ks": ks, "tokens": tokens, "draft_cost": args.draft_cost}

    from harness import launch
    from harness.errors import LaunchError

    print(f"speculative bench: impl={args.impl.text}, {tokens} tokens per run")
    try:
        result = launch(bench_rank, world_size=1, args=(cfg,), impl=args.impl,
                        timeout=args.timeout).values[0]
    except LaunchError as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    report(cfg, result["rows"])
    print(_plot(args.plot, result["rows"], alphas, ks))
    return 0

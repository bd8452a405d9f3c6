"""Co-located vs disaggregated RLHF on 4 ranks: iterations per second and the reward curves.

Alternates, `--rounds` times, one 4-rank launch of `run_colocated` (every rank generates, then
every rank trains) and one of `run_disaggregated` (ranks 0-1 train, ranks 2-3 generate; weight
syncs after every update, generation of batch k overlapping training on batch k-1), same
configuration and seed. Each rank times its own call (barrier before and after); the slowest
rank's time is the run's. Printed side by side:

    iterations per second of each placement, and their ratio (disaggregated / co-located)
    the final actor's exact expected score of each (grader's parent-side evaluation)

and the mean score per iteration of both placements is drawn to
grading/bench/rlhf_system.png. Note what the comparison measures: co-located trains on
4 ranks' batches per iteration, disaggregated on 2 (the other two generate), so per iteration
it learns from half the samples, one version stale. Asserts nothing about time: on a shared
CPU the ranks compete for cores, so the ratio says little about GPUs.

    python -m grader bench rlhf_system [--impl solutions] [--iterations 10] [--rounds 2]
        [--quick] [--plot PATH]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import torch.distributed as dist

from grader.bench import add_impl_option

DEFAULT_PLOT = Path("grading") / "bench" / "rlhf_system.png"


def _rank_run(ctx: Any, placement: str, iterations: int) -> dict[str, Any]:
    from assignments.rlhf_system.toy import RLHFConfig

    ctx.impl_module("rlhf_system", "rlhf")  # placement's siblings first (relative imports)
    ctx.impl_module("rlhf_system", "weight_sync")
    pl = ctx.impl_module("rlhf_system", "placement")
    cfg = RLHFConfig()
    dist.barrier()
    start = time.perf_counter()
    if placement == "colocated":
        out = pl.run_colocated(cfg, iterations)
    else:
        out = pl.run_disaggregated(cfg, iterations, [0, 1], [2, 3])
    dist.barrier()
    return {"seconds": time.perf_counter() - start, "scores": out.get("scores"),
            "actor": out["actor"]}


def expected_score(state: dict[str, Any], vocab: int, response_len: int) -> float:
    """The policy's exact expected count-up score over uniform prompts and every response."""
    import itertools

    import torch

    from assignments.rlhf_system.toy import TinyPolicy, toy_reward

    model = TinyPolicy(vocab, state["tok.weight"].shape[1])
    model.load_state_dict(state)
    seqs = torch.tensor(list(itertools.product(range(vocab), repeat=response_len)))
    total = 0.0
    with torch.no_grad():
        for p in range(vocab):
            prompts = torch.full((seqs.shape[0],), p)
            logits = model(torch.cat([prompts[:, None], seqs[:, :-1]], 1))
            logp = torch.log_softmax(logits, -1).gather(2, seqs[..., None])[..., 0].sum(1)
            total += float((logp.exp() * toy_reward(prompts, seqs, vocab)).sum())
    return total / vocab


def _plot(path: Path, curves: dict[str, list[float]]) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, ys in curves.items():
        ax.plot(range(len(ys)), ys, marker="o", label=name)
    ax.axhline(0.125, color="gray", linestyle=":", label="random policy")
    ax.set_xlabel("iteration")
    ax.set_ylabel("mean score of the batches trained on")
    ax.set_title("RLHF on the count-up toy: reward per iteration")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"reward curves drawn to {path}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench rlhf_system",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_impl_option(parser)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="4 iterations, 1 round")
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT)
    args = parser.parse_args(argv)
    iterations, rounds = (4, 1) if args.quick else (args.iterations, args.rounds)

    from assignments.rlhf_system.toy import RLHFConfig
    from harness import launch
    from harness.launcher import preload

    preload("torch._dynamo")
    cfg = RLHFConfig()
    seconds: dict[str, list[float]] = {"colocated": [], "disaggregated": []}
    last: dict[str, list[dict[str, Any]]] = {}
    for _ in range(rounds):
        for placement in seconds:
            result = launch(_rank_run, world_size=4, args=(placement, iterations),
                            impl=args.impl.text, timeout=600)
            seconds[placement].append(max(v["seconds"] for v in result.values))
            last[placement] = result.values
    rows = []
    for placement, times in seconds.items():
        median = statistics.median(times)
        score = expected_score(last[placement][0]["actor"], cfg.vocab, cfg.response_len)
        rows.append((placement, iterations / median, median, score))
    print(f"rlhf_system bench: {iterations} iterations, {rounds} round(s), 4 ranks, "
          f"impl {args.impl.text}")
    print(f"{'placement':<15}{'iter/s':>10}{'seconds':>10}{'expected score':>16}")
    for placement, rate, median, score in rows:
        print(f"{placement:<15}{rate:>10.2f}{median:>10.2f}{score:>16.3f}")
    print(f"ratio disaggregated / co-located iterations per second: {rows[1][1] / rows[0][1]:.2f}")
    curves = {"co-located (4 ranks generate and train)": last["colocated"][0]["scores"],
              "disaggregated (2 train, 2 generate)": last["disaggregated"][0]["scores"]}
    print(_plot(args.plot, curves))
    return 0

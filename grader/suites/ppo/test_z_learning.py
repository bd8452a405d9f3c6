"""Learning: the provided PPO loop with the functions under test solves CartPole-v1.

Solved means: the mean return of the last 20 finished episodes reaches 195 within 50,000
environment steps. Two fixed seeds run side by side, one per rank of a single 2-rank launch (the
ranks never communicate). The reference gets there in about 8,000-15,000 steps on every seed we
tried, so a correct implementation has a wide margin whatever its floating-point order.

This file's name sorts last on purpose: mutant runs stop at the first failure, and every unit
test is far cheaper than this one. A flipped clip direction still learns CartPole, which is why
the unit tests, not this test, must catch it.
"""

from __future__ import annotations

from typing import Any

import pytest

# It compares no value with a tolerance and draws from fixed seeds, so selfcheck's margin runs
# (other seeds, 2 threads per rank) would only repeat it, slowly: they leave it out.
pytestmark = pytest.mark.no_tolerance

SEEDS = (1, 2)
LABELS = ("A", "B")
TOTAL_STEPS = 50_000
TARGET = 195.0
WINDOW = 20
# What train_cartpole.train calls of ppo.py (masked_mean only through these).
TRAINING_CALLS = ("compute_gae", "masked_whiten", "ppo_clip_loss", "value_loss",
                  "entropy_from_logits")
LEARN_TIMEOUT = 600.0  # a loaded 2-core machine; the reference needs well under a minute


def rank_learn(ctx: Any, seed: int) -> dict[str, Any]:
    """Runs in each rank: train with the module under test, return a summary of the run."""
    from assignments.ppo.train_cartpole import Config, train

    ppo = ctx.impl_module("ppo", "ppo")
    config = Config(total_steps=TOTAL_STEPS, target_return=TARGET, window=WINDOW)
    run = train(ppo, seed, config, log=None)
    returns = run.episode_returns
    means = [sum(returns[i - WINDOW:i]) / WINDOW for i in range(WINDOW, len(returns) + 1)]
    last = run.updates[-1] if run.updates else {}
    return {"solved_at_step": run.solved_at_step, "steps": run.steps,
            "episodes": len(returns), "best_mean": max(means, default=float("nan")),
            "last": {k: float(v) for k, v in last.items()}}


@pytest.fixture(scope="module")
def learning(launch) -> list[dict[str, Any]]:
    result = launch(rank_learn, world_size=2, rank_args=[(seed,) for seed in SEEDS],
                    timeout=LEARN_TIMEOUT)
    return result.values


def check(run: dict[str, Any], label: str) -> None:
    if run["solved_at_step"] is not None and run["solved_at_step"] <= TOTAL_STEPS:
        return
    last = run["last"]
    stats = ", ".join(f"{k} {last[k]:.4g}" for k in ("approx_kl", "clipfrac", "entropy")
                      if k in last)
    raise AssertionError(
        f"seed {label}: CartPole-v1 not solved in {TOTAL_STEPS:,} steps: the mean return of "
        f"{WINDOW} episodes peaked at {run['best_mean']:.1f} (needs {TARGET:g}); last update: "
        f"{stats}. Run `python -m assignments.ppo.train_cartpole` and read README §9 and §14")


@pytest.mark.points(5)
@pytest.mark.exercises(*TRAINING_CALLS)
def test_learns_cartpole_seed_a(learning):
    check(learning[0], LABELS[0])


@pytest.mark.points(5)
@pytest.mark.exercises(*TRAINING_CALLS)
def test_learns_cartpole_seed_b(learning):
    check(learning[1], LABELS[1])

"""Public tests of ppo (20 points): run `pytest assignments/ppo`.

One rank process imports your ppo.py and calls each function on small inputs built here (a
"probe"); this process computes the expected values with plain torch and compares. Each probe
fails on its own, so a function you have not written yet costs only its own tests. The hidden
suite checks the same functions on harder cases (termination in the middle of a rollout,
truncation, padding, extreme logits, the KL estimators' bias) and trains CartPole-v1 with your
functions (README §12).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from grader.compare import assert_close
from harness.cases import case_value, run_cases

F64 = torch.float64


def rank_probes(ctx: Any, probes: dict[str, dict]) -> dict[str, dict]:
    """Runs in the rank: call ppo.<fn>(*args, **kwargs) for every probe, each in its own error
    scope (harness.cases); differentiate the (first) result w.r.t. the arguments in `grad`."""
    ppo = ctx.impl_module("ppo", "ppo")

    def call(spec: dict) -> dict:
        args = [a.clone().requires_grad_(True) if i in spec["grad"] else a
                for i, a in enumerate(spec["args"])]
        value = getattr(ppo, spec["fn"])(*args, **spec["kwargs"])
        grads = {}
        if spec["grad"]:
            first = value[0] if isinstance(value, tuple) else value
            first.sum().backward()
            grads = {i: args[i].grad for i in spec["grad"]}
        return {"value": value, "grads": grads}

    return run_cases(ctx, [(key, lambda spec=spec: call(spec)) for key, spec in probes.items()])


def probe(fn: str, *args: Any, grad: tuple[int, ...] = (), **kwargs: Any) -> dict:
    return {"fn": fn, "args": list(args), "kwargs": kwargs, "grad": list(grad)}


def got(probes: dict, key: str) -> dict:
    """The probe's {"value", "grads"}; a failed probe re-raises here ("not implemented yet:
    <function>" for a stub)."""
    return case_value(probes[key], FUNCTION[key])


def close(actual: Any, expected: torch.Tensor, what: str, hint: str = "",
          slips: tuple[tuple[torch.Tensor, str], ...] = ()) -> None:
    """Compare at float32 tolerance. `slips`: (what a known mistake returns, what to tell its
    author); a wrong result that matches one gets that message instead of `hint`."""
    if not isinstance(actual, torch.Tensor):
        raise AssertionError(f"{what}: expected a tensor, got {type(actual).__name__}")
    for value, message in slips:
        if value.shape == actual.shape and not torch.allclose(value, expected.to(value.dtype)) \
                and torch.allclose(actual.to(F64), value.to(F64), rtol=1e-4, atol=1e-4):
            hint = message
            break
    assert_close(actual.to(F64), expected, what=what, hint=hint, dtype=torch.float32,
                 check_dtype=False)


# -- inputs ------------------------------------------------------------------------------------
X = torch.tensor([[1.0, 2.0, 3.0, 100.0], [4.0, 5.0, 6.0, 7.0]], dtype=F64)
X_MASK = torch.tensor([[True, True, True, False], [True, True, True, True]])
REWARDS = torch.tensor([[1.0], [0.0], [2.0], [1.0]])  # one env, 4 steps
VALUES = torch.tensor([[0.5], [1.0], [-0.5], [2.0]])
NEXT_VALUES = torch.tensor([[1.0], [-0.5], [2.0], [0.0]])  # = VALUES[t+1]; last step terminates
TERMINATED = torch.tensor([[False], [False], [False], [True]])
TRUNCATED = torch.zeros(4, 1, dtype=torch.bool)
GAMMA = 0.9
LOGP_OLD = torch.tensor([-0.5, -1.0, -2.0, -0.1], dtype=F64)
ADV = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=F64)
POSITIVE_ADV = torch.tensor([1.0, 2.0, 0.5, 3.0], dtype=F64)
LOGP, REF_LOGP = torch.tensor([[-1.0, -2.0, -0.5]]), torch.tensor([[-1.5, -1.0, -0.5]])


def build() -> dict[str, dict]:
    gae = (REWARDS, VALUES, TERMINATED, TRUNCATED, NEXT_VALUES)
    return {
        "mean": probe("masked_mean", X, X_MASK),
        "mean_rows": probe("masked_mean", X, X_MASK, 1),
        "whiten": probe("masked_whiten", X, X_MASK),
        "gae_td": probe("compute_gae", *gae, gamma=GAMMA, lam=0.0),
        "gae_mc": probe("compute_gae", *gae, gamma=GAMMA, lam=1.0),
        "clip_one": probe("ppo_clip_loss", LOGP_OLD.clone(), LOGP_OLD, ADV, 0.2, grad=(0,)),
        "clip_high": probe("ppo_clip_loss", LOGP_OLD + math.log(1.5), LOGP_OLD, POSITIVE_ADV,
                           0.2, grad=(0,)),
        "value": probe("value_loss", VALUES[:, 0], None, REWARDS[:, 0]),
        "entropy": probe("entropy_from_logits", torch.zeros(3, 4)),
        "k1": probe("kl_penalty", LOGP, REF_LOGP, "k1"),
        "rewards": probe("rlhf_token_rewards", torch.tensor([3.0]), LOGP, REF_LOGP,
                         torch.tensor([[True, True, False]]), 0.1),
    }


FUNCTION = {key: spec["fn"] for key, spec in build().items()}  # what each probe calls


def gae_cut_at_next_step(gamma: float, lam: float) -> torch.Tensor:
    """compute_gae's advantages when the recursion is cut with the flags of step t+1."""
    r, v, nv = REWARDS.to(F64), VALUES.to(F64), NEXT_VALUES.to(F64)
    adv = torch.zeros_like(r)
    running = 0.0
    for t in reversed(range(4)):
        delta = float(r[t, 0]) + GAMMA * (0.0 if TERMINATED[t, 0] else float(nv[t, 0])) \
            - float(v[t, 0])
        cut = t + 1 < 4 and bool(TERMINATED[t + 1, 0] or TRUNCATED[t + 1, 0])
        running = delta if cut else delta + gamma * lam * running
        adv[t, 0] = running
    return adv


@pytest.fixture(scope="module")
def probes(launch):
    return launch(rank_probes, world_size=1, args=(build(),), timeout=120).values[0]


# -- tests -------------------------------------------------------------------------------------
@pytest.mark.points(2)
@pytest.mark.exercises("masked_mean")
def test_masked_mean(probes):
    close(got(probes, "mean")["value"], torch.tensor(28.0 / 7, dtype=F64),
          "masked_mean(x, mask)", "the padded 100.0 must not count (README §8)",
          slips=((torch.tensor(28.0 / 8, dtype=F64),
                  "divide by the number of valid positions (mask.sum()), not the full length "
                  "(README §8)"),))
    close(got(probes, "mean_rows")["value"], torch.tensor([2.0, 5.5], dtype=F64),
          "masked_mean(x, mask, dim=1)", "divide each row by its own count of valid entries")


@pytest.mark.points(2)
@pytest.mark.exercises("masked_whiten")
def test_masked_whiten(probes):
    valid = X[X_MASK]
    expected = (valid - valid.mean()) / torch.sqrt(valid.var(unbiased=False) + 1e-8)
    unbiased = ("you divide by count - 1 (the unbiased std/var, torch.std's default); the "
                "variance divides by the count of valid entries, e.g. var(unbiased=False) "
                "(README §8)")
    out = got(probes, "whiten")["value"]
    close(out[X_MASK] if isinstance(out, torch.Tensor) else out, expected,
          "masked_whiten(x, mask) at valid positions",
          "one masked mean and one biased masked variance over all valid entries (README §8)",
          slips=(((valid - valid.mean()) / valid.std(), unbiased),))


@pytest.mark.points(4)
@pytest.mark.exercises("compute_gae")
def test_gae_lambda_limits(probes):
    r, v, nv = REWARDS.to(F64), VALUES.to(F64), NEXT_VALUES.to(F64)
    bootstrap = torch.where(TERMINATED, 0.0, nv)
    td = r + GAMMA * bootstrap - v
    advantages, returns = got(probes, "gae_td")["value"]
    close(advantages, td, "compute_gae advantages with lam=0",
          "lam=0 gives the TD error r + gamma*next_values[t] - values[t]; a terminated step "
          "bootstraps 0 (README §4)")
    discounted = torch.zeros_like(r)
    running = 0.0
    for t in reversed(range(4)):
        running = float(r[t, 0]) + GAMMA * running
        discounted[t, 0] = running
    advantages, returns = got(probes, "gae_mc")["value"]
    close(returns, discounted, "compute_gae returns with lam=1",
          "lam=1 gives the discounted return of the episode; returns = advantages + values",
          slips=((gae_cut_at_next_step(GAMMA, 1.0) + v,
                  "cut the recursion with the flags of step t itself (terminated[t] | "
                  "truncated[t]), not those of step t+1 (README §4)"),))


@pytest.mark.points(3)
@pytest.mark.exercises("ppo_clip_loss")
def test_clip_loss_at_ratio_one(probes):
    res = got(probes, "clip_one")
    loss, stats = res["value"]
    hint = "at r = 1 the loss is -mean(A) and its gradient -A/N (README §3)"
    sign = ("the loss has the wrong sign: minimise -A*r (the negated objective), so that the "
            "optimiser raises r where A > 0 (README §3)")
    clipped_a = "clip the ratio r into [1 - eps, 1 + eps], not the advantages A (README §3)"
    close(loss, -ADV.mean(), "ppo_clip_loss at ratio 1", hint,
          slips=((ADV.mean(), sign),
                 (torch.maximum(-ADV, -ADV.clamp(0.8, 1.2)).mean(), clipped_a)))
    close(res["grads"][0], -ADV / 4, "gradient w.r.t. logp_new at ratio 1", hint)
    for name in ("clipfrac", "approx_kl"):
        close(stats.get(name), torch.tensor(0.0, dtype=F64), f"stats[{name!r}] at ratio 1",
              "nothing is clipped and the policies are equal (README §9)")


@pytest.mark.points(3)
@pytest.mark.exercises("ppo_clip_loss")
def test_clip_loss_cuts_the_gradient(probes):
    res = got(probes, "clip_high")
    loss, _ = res["value"]
    hint = ("with A > 0 and r = 1.5 > 1 + eps the clipped term -A*(1 + eps) is the max: the "
            "loss is -mean(A)*1.2 and the gradient 0 (README §3)")
    close(loss, -POSITIVE_ADV.mean() * 1.2, "ppo_clip_loss with A > 0 and r = 1.5", hint,
          slips=((-POSITIVE_ADV.mean() * 1.5,
                  "take the max of the two negated terms, not the min: with A > 0 and r = 1.5 "
                  "the clipped term -A*(1 + eps) is the max, so the loss is -mean(A)*1.2 and "
                  "the gradient 0 (README §3)"),))
    grad = res["grads"][0]
    close(grad if grad is not None else torch.zeros(4, dtype=F64), torch.zeros(4, dtype=F64),
          "gradient w.r.t. logp_new with A > 0 and r = 1.5", hint)


@pytest.mark.points(2)
@pytest.mark.exercises("value_loss")
def test_value_loss(probes):
    expected = 0.5 * ((VALUES - REWARDS) ** 2).mean().to(F64)
    close(got(probes, "value")["value"], expected, "value_loss without clipping",
          "0.5 * mean((values - returns)**2) (README §5)")


@pytest.mark.points(2)
@pytest.mark.exercises("entropy_from_logits")
def test_entropy_of_uniform(probes):
    close(got(probes, "entropy")["value"], torch.tensor(math.log(4), dtype=F64),
          "entropy_from_logits of uniform logits over 4 actions",
          "H = -sum p log p in nats: ln 4 for 4 equal logits (README §5)")


@pytest.mark.points(2)
@pytest.mark.exercises("kl_penalty", "rlhf_token_rewards")
def test_kl_and_rlhf_reward(probes):
    k1 = (LOGP - REF_LOGP).to(F64)
    close(got(probes, "k1")["value"], k1, "kl_penalty k1", "logp - ref_logp (README §7)",
          slips=((-k1, "the log-ratio is logp - ref_logp (policy minus reference), not "
                       "ref_logp - logp (README §7)"),))
    expected = torch.tensor([[-0.1 * 0.5, -0.1 * -1.0 + 3.0, 0.0]], dtype=F64)
    first = torch.tensor([[-0.1 * 0.5 + 3.0, -0.1 * -1.0, 0.0]], dtype=F64)
    close(got(probes, "rewards")["value"], expected, "rlhf_token_rewards",
          "-kl_coef * k1 on valid tokens, the score added at the last valid one (README §6)",
          slips=((first, "add the score at the last valid token (the largest t with mask "
                         "true), not the first (README §6)"),))

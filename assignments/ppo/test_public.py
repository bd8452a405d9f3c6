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
import traceback
from typing import Any

import pytest
import torch

from grader.compare import assert_close
from harness.errors import NotImplementedInRank, RankFailure

F64 = torch.float64


def rank_probes(ctx: Any, probes: dict[str, dict]) -> dict[str, dict]:
    """Runs in the rank: call ppo.<fn>(*args, **kwargs) for every probe; differentiate the
    (first) result w.r.t. the arguments listed in `grad`."""
    ppo = ctx.impl_module("ppo", "ppo")
    out: dict[str, dict] = {}
    for key, spec in probes.items():
        try:
            args = [a.clone().requires_grad_(True) if i in spec["grad"] else a
                    for i, a in enumerate(spec["args"])]
            value = getattr(ppo, spec["fn"])(*args, **spec["kwargs"])
            grads = {}
            if spec["grad"]:
                first = value[0] if isinstance(value, tuple) else value
                first.sum().backward()
                grads = {i: args[i].grad for i in spec["grad"]}
            if isinstance(value, tuple):
                value = [{k: x.detach() if isinstance(x, torch.Tensor) else x
                          for k, x in v.items()} if isinstance(v, dict) else v for v in value]
            out[key] = {"ok": True, "value": value, "grads": grads}
        except Exception as exc:  # noqa: BLE001 - each probe reports its own failure
            out[key] = {"ok": False, "exc_type": type(exc).__name__, "message": str(exc)[:500],
                        "traceback": traceback.format_exc()[-2000:]}
    return out


def probe(fn: str, *args: Any, grad: tuple[int, ...] = (), **kwargs: Any) -> dict:
    return {"fn": fn, "args": list(args), "kwargs": kwargs, "grad": list(grad)}


def got(probes: dict, key: str) -> dict:
    """The probe's {"value", "grads"}; a failed probe re-raises as the harness reports it."""
    res = probes[key]
    if res["ok"]:
        return res
    fields = dict(rank=0, exc_type=res["exc_type"], message=res["message"],
                  traceback=res["traceback"], output_tail="")
    if res["exc_type"] == "NotImplementedError":
        raise NotImplementedInRank(f"not implemented yet: {res['message']}", **fields)
    raise RankFailure(f"{key} raised {res['exc_type']}: {res['message']}\n{res['traceback']}",
                      **fields)


def close(actual: Any, expected: torch.Tensor, what: str, hint: str = "") -> None:
    if not isinstance(actual, torch.Tensor):
        raise AssertionError(f"{what}: expected a tensor, got {type(actual).__name__}")
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


@pytest.fixture(scope="module")
def probes(launch):
    return launch(rank_probes, world_size=1, args=(build(),), timeout=120).values[0]


# -- tests -------------------------------------------------------------------------------------
@pytest.mark.points(2)
def test_masked_mean(probes):
    close(got(probes, "mean")["value"], torch.tensor(28.0 / 7, dtype=F64),
          "masked_mean(x, mask)", "the padded 100.0 must not count (README §8)")
    close(got(probes, "mean_rows")["value"], torch.tensor([2.0, 5.5], dtype=F64),
          "masked_mean(x, mask, dim=1)", "divide each row by its own count of valid entries")


@pytest.mark.points(2)
def test_masked_whiten(probes):
    valid = X[X_MASK]
    expected = (valid - valid.mean()) / torch.sqrt(valid.var(unbiased=False) + 1e-8)
    out = got(probes, "whiten")["value"]
    close(out[X_MASK] if isinstance(out, torch.Tensor) else out, expected,
          "masked_whiten(x, mask) at valid positions",
          "one masked mean and one biased masked variance over all valid entries (README §8)")


@pytest.mark.points(4)
def test_gae_lambda_limits(probes):
    r, v, nv = REWARDS.to(F64), VALUES.to(F64), NEXT_VALUES.to(F64)
    bootstrap = torch.where(TERMINATED, 0.0, nv)
    td = r + GAMMA * bootstrap - v
    advantages, returns = got(probes, "gae_td")["value"]
    close(advantages, td, "compute_gae advantages with lam=0",
          "lam=0 gives the TD error; a terminated step bootstraps 0 (README §4)")
    discounted = torch.zeros_like(r)
    running = 0.0
    for t in reversed(range(4)):
        running = float(r[t, 0]) + GAMMA * running
        discounted[t, 0] = running
    advantages, returns = got(probes, "gae_mc")["value"]
    close(returns, discounted, "compute_gae returns with lam=1",
          "lam=1 gives the discounted return of the episode; returns = advantages + values")


@pytest.mark.points(3)
def test_clip_loss_at_ratio_one(probes):
    res = got(probes, "clip_one")
    loss, stats = res["value"]
    hint = "at r = 1 the loss is -mean(A) and its gradient -A/N (README §3)"
    close(loss, -ADV.mean(), "ppo_clip_loss at ratio 1", hint)
    close(res["grads"][0], -ADV / 4, "gradient w.r.t. logp_new at ratio 1", hint)
    for name in ("clipfrac", "approx_kl"):
        close(stats.get(name), torch.tensor(0.0, dtype=F64), f"stats[{name!r}] at ratio 1",
              "nothing is clipped and the policies are equal (README §9)")


@pytest.mark.points(3)
def test_clip_loss_cuts_the_gradient(probes):
    res = got(probes, "clip_high")
    loss, _ = res["value"]
    hint = ("with A > 0 and r = 1.5 > 1 + eps the clipped term -A*(1 + eps) is the max: the "
            "loss is -mean(A)*1.2 and the gradient 0 (README §3)")
    close(loss, -POSITIVE_ADV.mean() * 1.2, "ppo_clip_loss with A > 0 and r = 1.5", hint)
    grad = res["grads"][0]
    close(grad if grad is not None else torch.zeros(4, dtype=F64), torch.zeros(4, dtype=F64),
          "gradient w.r.t. logp_new with A > 0 and r = 1.5", hint)


@pytest.mark.points(2)
def test_value_loss(probes):
    expected = 0.5 * ((VALUES - REWARDS) ** 2).mean().to(F64)
    close(got(probes, "value")["value"], expected, "value_loss without clipping",
          "0.5 * mean((values - returns)**2) (README §5)")


@pytest.mark.points(2)
def test_entropy_of_uniform(probes):
    close(got(probes, "entropy")["value"], torch.tensor(math.log(4), dtype=F64),
          "entropy_from_logits of uniform logits over 4 actions",
          "H = -sum p log p in nats: ln 4 for 4 equal logits (README §5)")


@pytest.mark.points(2)
def test_kl_and_rlhf_reward(probes):
    k1 = (LOGP - REF_LOGP).to(F64)
    close(got(probes, "k1")["value"], k1, "kl_penalty k1", "logp - ref_logp (README §7)")
    expected = torch.tensor([[-0.1 * 0.5, -0.1 * -1.0 + 3.0, 0.0]], dtype=F64)
    close(got(probes, "rewards")["value"], expected, "rlhf_token_rewards",
          "-kl_coef * k1 on valid tokens, the score added at the last valid one (README §6)")

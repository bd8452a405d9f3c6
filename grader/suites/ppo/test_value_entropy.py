"""value_loss with and without clipping (ValueError without old_values); entropy_from_logits on
known and extreme distributions."""

from __future__ import annotations

import math

import pytest
import torch

from grader.seeds import seeded_generator
from grader.suites.ppo._cases import F64, probe, run_probes
from grader.suites.ppo._ref import close, error_of, finite, grad_of, result, said

VALUE_EPS = 0.2
INF = float("inf")


def value_inputs(seed: int, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    gen = seeded_generator(seed)
    return (torch.randn(shape, generator=gen, dtype=F64),
            torch.randn(shape, generator=gen, dtype=F64) * 2.0)


def clip_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Values that moved by more and by less than eps from old_values, both towards and away
    from the returns, so the clipped error is the max in some positions and not in others."""
    old = torch.tensor([1.0, 1.0, 1.0, 1.0, -2.0, -2.0, 0.5, 0.5], dtype=F64)
    move = torch.tensor([0.5, -0.5, 0.1, 0.5, -0.6, 0.3, 0.0, -0.15], dtype=F64)
    returns = torch.tensor([3.0, 3.0, 0.0, 1.2, -2.1, 1.0, 2.0, -1.0], dtype=F64)
    return old + move, old, returns


def ref_value_loss(values, old, returns, eps=None, mask=None) -> torch.Tensor:
    err = (values - returns) ** 2
    if eps is not None:
        err = torch.maximum(err, (old + (values - old).clamp(-eps, eps) - returns) ** 2)
    m = torch.ones_like(err, dtype=torch.bool) if mask is None else mask
    return 0.5 * err[m].mean()


def ref_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy in float64 (finite logits only)."""
    logp = torch.log_softmax(logits.to(F64), dim=-1)
    return -(logp.exp() * logp).sum(-1)


KNOWN_LOGITS = torch.tensor([
    [0.0, 0.0, 0.0],  # uniform over 3: ln 3
    [math.log(0.5), math.log(0.25), math.log(0.25)],  # 1.5 ln 2
    [math.log(0.5) + 7.0, math.log(0.25) + 7.0, math.log(0.25) + 7.0],  # shifted: same
    [3.0, -40.0, 11.0],  # masked out
], dtype=F64)
KNOWN_MASK = torch.tensor([True, True, True, False])
EXTREME_LOGITS = torch.tensor([[1000.0, 0.0], [-1000.0, 1000.0], [500.0, 500.0]])
INF_LOGITS = torch.tensor([[0.0, -INF, 0.0], [-INF, 5.0, -INF], [1.0, 1.0, -INF]])


def batch_logits() -> tuple[torch.Tensor, torch.Tensor]:
    gen = seeded_generator(51)
    return (torch.randn(2, 3, 4, generator=gen, dtype=F64) * 2.0,
            torch.randn(2, 3, generator=gen, dtype=F64))


def build() -> dict[str, dict]:
    values, returns = value_inputs(41, (8,))
    mvalues, mreturns = value_inputs(42, (2, 5))
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    mreturns = torch.where(mask, mreturns, torch.tensor(1e3, dtype=F64))
    logits, weights = batch_logits()
    return {
        "plain": probe("value_loss", values, None, returns, grad=(0,)),
        "masked": probe("value_loss", mvalues, mvalues.clone(), mreturns, None, mask),
        "clipped": probe("value_loss", *clip_inputs(), clip_eps=VALUE_EPS, grad=(0,)),
        "clip_without_old": probe("value_loss", values, None, returns, clip_eps=VALUE_EPS),
        "known": probe("entropy_from_logits", KNOWN_LOGITS, KNOWN_MASK),
        "batch": probe("entropy_from_logits", logits, grad=(0,)),
        "extreme": probe("entropy_from_logits", EXTREME_LOGITS),
        "neg_inf": probe("entropy_from_logits", INF_LOGITS),
        "batch_weighted": probe("entropy_from_logits", logits, weights > 0),
    }


@pytest.fixture(scope="module")
def probes(launch):
    return run_probes(launch, build())


@pytest.mark.points(2)
@pytest.mark.exercises("value_loss")
def test_value_loss_is_half_the_masked_mse(probes):
    values, returns = value_inputs(41, (8,))
    got = result(probes, "plain", "value_loss")
    hint = said(hint="0.5 * mean((values - returns)**2) (README §5)")
    close(got["result"], ref_value_loss(values, None, returns), "value_loss without clipping",
          hint)
    close(grad_of(got, 0, "value_loss", like=values), (values - returns) / values.numel(),
          "gradient of value_loss w.r.t. values", hint)
    mvalues, mreturns = value_inputs(42, (2, 5))
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    close(result(probes, "masked", "value_loss")["result"],
          ref_value_loss(mvalues, None, mreturns, mask=mask), "value_loss with a padding mask",
          "average over valid positions only (README §8)")


@pytest.mark.points(3)
@pytest.mark.exercises("value_loss")
def test_value_clipping_takes_the_larger_error(probes):
    values, old, returns = clip_inputs()
    got = result(probes, "clipped", "value_loss")
    hint = said(
        hint=("take the max of the clipped and unclipped squared errors, the values clipped to "
             "old_values +- eps (README §5)"))
    close(got["result"], ref_value_loss(values, old, returns, VALUE_EPS),
          "value_loss with clip_eps", hint)
    leaf = values.clone().requires_grad_(True)
    ref_value_loss(leaf, old, returns, VALUE_EPS).backward()
    close(grad_of(got, 0, "value_loss", like=values), leaf.grad,
          "gradient of value_loss with clip_eps w.r.t. values", hint)
    bad = error_of(probes, "clip_without_old")  # a stub raises "not implemented" here
    assert bad is not None and bad.get("type") == "ValueError", (
        f"value_loss(values, None, returns, clip_eps=0.2) should raise ValueError (nothing to "
        f"clip around), {'returned a value' if bad is None else 'raised ' + str(bad.get('type'))}")


@pytest.mark.points(3)
@pytest.mark.exercises("entropy_from_logits")
def test_entropy_of_known_distributions(probes):
    expected = (math.log(3) + 1.5 * math.log(2) * 2) / 3
    close(result(probes, "known", "entropy_from_logits")["result"],
          torch.tensor(expected, dtype=F64), "entropy_from_logits of uniform and (1/2, 1/4, 1/4)",
          "H = -sum p log p in nats, averaged over the valid positions (README §5)")
    logits, weights = batch_logits()
    got = result(probes, "batch", "entropy_from_logits")
    close(got["result"], ref_entropy(logits).mean(), "entropy_from_logits over [2, 3, 4] logits",
          "reduce the last dim, then average over every position")
    leaf = logits.clone().requires_grad_(True)
    ref_entropy(leaf).mean().backward()
    close(grad_of(got, 0, "entropy_from_logits", like=logits), leaf.grad,
          "gradient of entropy_from_logits w.r.t. logits", "keep it differentiable")
    keep = weights > 0
    close(result(probes, "batch_weighted", "entropy_from_logits")["result"],
          ref_entropy(logits)[keep].mean(), "entropy_from_logits with a mask of shape [2, 3]",
          "the mask has one flag per distribution: logits.shape[:-1]")


@pytest.mark.points(2)
@pytest.mark.exercises("entropy_from_logits")
def test_entropy_is_stable_for_extreme_logits(probes):
    hint = said(
        hint=("use log_softmax, or softmax with p*log p = 0 where p = 0; never exp() raw logits "
            "(README §5)"))
    what = "entropy_from_logits of logits of magnitude 1000"
    got = finite(result(probes, "extreme", "entropy_from_logits")["result"], what, hint)
    close(got, torch.tensor(math.log(2) / 3, dtype=F64), what, hint)
    what = "entropy_from_logits with -inf logits"
    got = finite(result(probes, "neg_inf", "entropy_from_logits")["result"], what, hint)
    close(got, torch.tensor(2 * math.log(2) / 3, dtype=F64), what, hint)

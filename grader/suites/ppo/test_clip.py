"""ppo_clip_loss: closed forms, where the gradient vanishes and where not, statistics, masks.

The gradient cases are the heart of PPO (README §3): when the ratio has left the trust region in
the direction the advantage favours, the clipped term is the larger negated objective and the
gradient is exactly 0; in the other direction the unclipped term wins and the full gradient
-A * r / N remains.
"""

from __future__ import annotations

import pytest
import torch

from grader.seeds import seeded_generator
from grader.suites.ppo._cases import F64, probe, run_probes
from grader.suites.ppo._ref import close, grad_of, result, said

N = 12
EPS = 0.2


def old_logp(seed: int, shape: tuple[int, ...] = (N,)) -> torch.Tensor:
    gen = seeded_generator(seed)
    return torch.rand(shape, generator=gen, dtype=F64).mul(3.0).add(0.1).neg()  # log-probs < 0


def advantages(seed: int, sign: float = 0.0, shape: tuple[int, ...] = (N,)) -> torch.Tensor:
    """Random advantages; sign +1/-1 forces all positive/negative (magnitudes in [0.1, 2.1])."""
    gen = seeded_generator(seed)
    if sign:
        return sign * (torch.rand(shape, generator=gen, dtype=F64) * 2.0 + 0.1)
    return torch.randn(shape, generator=gen, dtype=F64)


def at_ratio(logp: torch.Tensor, ratio: float | torch.Tensor) -> torch.Tensor:
    """logp_new such that exp(logp_new - logp) = ratio."""
    return logp + torch.log(torch.as_tensor(ratio, dtype=F64))


def reference(logp_new, logp_old, adv, eps, mask=None) -> tuple[torch.Tensor, dict]:
    r = torch.exp(logp_new - logp_old)
    per = torch.maximum(-adv * r, -adv * r.clamp(1 - eps, 1 + eps))
    m = torch.ones_like(r, dtype=torch.bool) if mask is None else mask
    stats = {"clipfrac": ((r - 1).abs() > eps)[m].to(F64).mean(),
             "approx_kl": ((r - 1) - torch.log(r))[m].mean(), "ratio_mean": r[m].mean()}
    return per[m].mean(), stats


def mixed_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = seeded_generator(35)
    old = old_logp(34)
    ratios = torch.rand(N, generator=gen, dtype=F64) * 1.1 + 0.5  # in [0.5, 1.6]
    return at_ratio(old, ratios), old, advantages(36)


def masked_inputs() -> tuple[torch.Tensor, ...]:
    """[3, 5] with padding whose ratio is e^5 and whose advantages are huge."""
    shape = (3, 5)
    gen = seeded_generator(37)
    old = old_logp(38, shape)
    new = old + (torch.rand(shape, generator=gen, dtype=F64) - 0.5) * 0.8
    adv = advantages(39, shape=shape)
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    new = torch.where(mask, new, old + 5.0)
    adv = torch.where(mask, adv, torch.tensor(1e3, dtype=F64))
    return new, old, adv, mask


STATS_RATIOS = torch.tensor([1.0, 1.1, 1.3, 0.7, 0.85, 2.0], dtype=F64)


def build() -> dict[str, dict]:
    old = old_logp(31)
    pos, neg = advantages(32, +1.0), advantages(33, -1.0)
    stats_old = old_logp(40, (6,))
    probes = {
        "ratio_one": probe("ppo_clip_loss", old.clone(), old, advantages(30), EPS, grad=(0,)),
        "pos_high": probe("ppo_clip_loss", at_ratio(old, 1.5), old, pos, EPS, grad=(0,)),
        "neg_low": probe("ppo_clip_loss", at_ratio(old, 0.5), old, neg, EPS, grad=(0,)),
        "neg_high": probe("ppo_clip_loss", at_ratio(old, 1.5), old, neg, EPS, grad=(0,)),
        "pos_low": probe("ppo_clip_loss", at_ratio(old, 0.5), old, pos, EPS, grad=(0,)),
        "mixed": probe("ppo_clip_loss", *mixed_inputs(), clip_eps=0.1),
        # clip_eps left at its default, 0.2 (EPS)
        "stats": probe("ppo_clip_loss", at_ratio(stats_old, STATS_RATIOS), stats_old,
                       advantages(41, shape=(6,))),
        # r = 1 exactly and clip_eps = 0: |r - 1| = clip_eps is not "> clip_eps"
        "stats_tie": probe("ppo_clip_loss", stats_old.clone(), stats_old,
                           advantages(41, shape=(6,)), 0.0),
    }
    new, old_m, adv, mask = masked_inputs()
    probes["masked"] = probe("ppo_clip_loss", new, old_m, adv, EPS, mask, grad=(0,))
    return probes


@pytest.fixture(scope="module")
def probes(launch):
    return run_probes(launch, build())


def loss_and_stats(got: dict, what: str) -> tuple[object, dict]:
    value = got["result"]
    if not isinstance(value, (list, tuple)) or len(value) != 2 or not isinstance(value[1], dict):
        raise AssertionError(f"{what} returned {type(value).__name__}; expected the tuple "
                             f"(loss, stats dict)")
    return value[0], value[1]


def check_case(probes: dict, key: str, ratio: float, sign: float, clipped: bool, what: str,
               hint: str) -> None:
    adv = advantages(32 if sign > 0 else 33, sign)
    got = result(probes, key, "ppo_clip_loss")
    loss, _ = loss_and_stats(got, "ppo_clip_loss")
    effective = min(max(ratio, 1 - EPS), 1 + EPS) if clipped else ratio
    close(loss, (-adv * effective).mean(), f"ppo_clip_loss {what}", hint)
    expected_grad = torch.zeros(N, dtype=F64) if clipped else -adv * ratio / N
    grad = grad_of(got, 0, "ppo_clip_loss", like=adv)
    close(grad, expected_grad, f"gradient of ppo_clip_loss w.r.t. logp_new {what}", hint)


@pytest.mark.points(3)
@pytest.mark.exercises("ppo_clip_loss")
def test_ratio_one_gives_minus_mean_advantage(probes):
    adv = advantages(30)
    got = result(probes, "ratio_one", "ppo_clip_loss")
    loss, _ = loss_and_stats(got, "ppo_clip_loss")
    hint = said(
        hint=("at r = 1 the loss is -mean(A) and its gradient -A/N: minimise -A*r, clip the "
            "ratio r (not A) (README §3)"))
    close(loss, -adv.mean(), "ppo_clip_loss at ratio 1", hint)
    close(grad_of(got, 0, "ppo_clip_loss", like=adv), -adv / N,
          "gradient of ppo_clip_loss w.r.t. logp_new at ratio 1", hint)


@pytest.mark.points(3)
@pytest.mark.exercises("ppo_clip_loss")
def test_no_gradient_when_positive_advantage_ratio_above_band(probes):
    check_case(probes, "pos_high", 1.5, +1.0, True, "with A > 0 and r > 1 + eps",
               "the clipped term -A*(1+eps) is the max there, so the gradient is 0; take the "
               "max of the two negated terms, not the min (README §3)")


@pytest.mark.points(3)
@pytest.mark.exercises("ppo_clip_loss")
def test_no_gradient_when_negative_advantage_ratio_below_band(probes):
    check_case(probes, "neg_low", 0.5, -1.0, True, "with A < 0 and r < 1 - eps",
               "the clipped term -A*(1-eps) is the max there, so the gradient is 0 (README §3)")


@pytest.mark.points(3)
@pytest.mark.exercises("ppo_clip_loss")
def test_full_gradient_outside_band_against_the_advantage(probes):
    hint = said(
        hint=("when r left the band against A's direction the unclipped term -A*r is the max: "
            "the full gradient -A*r/N must remain, PPO's pessimistic bound (README §3)"))
    check_case(probes, "neg_high", 1.5, -1.0, False, "with A < 0 and r > 1 + eps", hint)
    check_case(probes, "pos_low", 0.5, +1.0, False, "with A > 0 and r < 1 - eps", hint)


@pytest.mark.points(1)
@pytest.mark.exercises("ppo_clip_loss")
def test_loss_on_mixed_inputs(probes):
    new, old, adv = mixed_inputs()
    loss, _ = loss_and_stats(result(probes, "mixed", "ppo_clip_loss"), "ppo_clip_loss")
    close(loss, reference(new, old, adv, 0.1)[0], "ppo_clip_loss on mixed ratios, clip_eps=0.1",
          "use clip_eps from the argument")


@pytest.mark.points(3)
@pytest.mark.exercises("ppo_clip_loss")
def test_statistics_on_known_ratios(probes):
    _, stats = loss_and_stats(result(probes, "stats", "ppo_clip_loss"), "ppo_clip_loss")
    ratios = STATS_RATIOS
    expected = {
        "clipfrac": torch.tensor(0.5, dtype=F64),  # 1.3, 0.7 and 2.0 are out of [0.8, 1.2]
        "approx_kl": ((ratios - 1) - torch.log(ratios)).mean(),
        "ratio_mean": ratios.mean(),
    }
    hints = {"clipfrac": said(hint="count both sides of the band: the fraction with "
                                   "|r - 1| > clip_eps"),
             "approx_kl": said(hint="the mean of (r - 1) - log r (k3), not of log r"),
             "ratio_mean": said(hint="the mean of r = exp(logp_new - logp_old)")}
    for name, value in expected.items():
        if name not in stats:
            raise AssertionError(f"ppo_clip_loss stats has no {name!r} (keys: {sorted(stats)}); "
                                 f"README §9 lists clipfrac, approx_kl and ratio_mean")
        close(stats[name], value, f"ppo_clip_loss stats[{name!r}]", hints[name] + " (README §9)")
    _, tie = loss_and_stats(result(probes, "stats_tie", "ppo_clip_loss"), "ppo_clip_loss")
    close(tie.get("clipfrac"), torch.tensor(0.0, dtype=F64),
          "ppo_clip_loss stats['clipfrac'] with r = 1 everywhere and clip_eps = 0",
          said(hint="clipfrac counts |r - 1| > clip_eps strictly; equal is inside the band"))


@pytest.mark.points(3)
@pytest.mark.exercises("ppo_clip_loss")
def test_padding_never_counts(probes):
    new, old, adv, mask = masked_inputs()
    got = result(probes, "masked", "ppo_clip_loss")
    loss, stats = loss_and_stats(got, "ppo_clip_loss")
    ref_loss, ref_stats = reference(new, old, adv, EPS, mask)
    hint = said(
        hint="a masked mean over valid tokens only, for the loss and every statistic (README §8)")
    close(loss, ref_loss, "ppo_clip_loss with a padding mask", hint)
    for name, value in ref_stats.items():
        if name in stats:
            close(stats[name], value, f"ppo_clip_loss stats[{name!r}] with a padding mask", hint)
    grad = grad_of(got, 0, "ppo_clip_loss", like=new)
    close(grad.masked_fill(mask, 0.0) if grad.shape == mask.shape else grad,
          torch.zeros_like(new), "gradient of ppo_clip_loss at padded tokens",
          "padded tokens must get zero gradient")

"""masked_mean and masked_whiten: padding never counts; empty rows and lone elements stay finite."""

from __future__ import annotations

import pytest
import torch

from grader.seeds import seeded_generator
from grader.suites.ppo._cases import F64, probe, run_probes
from grader.suites.ppo._ref import close, finite, grad_of, result, said, valid

GARBAGE = 1e4  # what padded positions hold: large, so a leak is obvious


def padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """x [4, 6] float64 with a right-padded, a left-padded, a full and an empty row."""
    gen = seeded_generator(11)
    x = torch.randn(4, 6, generator=gen, dtype=F64)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 1], [1] * 6, [0] * 6],
                        dtype=torch.bool)
    return torch.where(mask, x, torch.tensor(GARBAGE, dtype=F64)), mask


# Rows of x[:2] with one and two valid positions (a count of 1 is its own edge case).
ONE_VALID = torch.tensor([[0, 1, 0, 0, 0, 0], [0, 0, 1, 1, 0, 0]], dtype=torch.bool)


def ref_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    m = mask.to(F64)
    if dim is None:
        return (x * m).sum() / m.sum().clamp(min=1)
    return (torch.where(mask, x, 0.0)).sum(dim) / m.sum(dim).clamp(min=1)


def ref_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    valid = x[mask]
    mean = valid.mean()
    var = ((valid - mean) ** 2).mean()
    return (x - mean) / torch.sqrt(var + eps)


def unbiased_whitens(x: torch.Tensor, mask: torch.Tensor | None = None, eps: float = 1e-8
                     ) -> list[tuple[torch.Tensor, str]]:
    """(what whitening returns, what to say) with the unbiased std (torch.std's default,
    divide by count - 1), eps inside the square root or added to the std."""
    valid = x if mask is None else x[mask]
    mean, var = valid.mean(), valid.var(unbiased=True)
    message = said(hint="you divide by count - 1 (the unbiased std/var, torch.std's default); "
                        "the variance must divide by the count of valid entries, e.g. "
                        "var(unbiased=False) (README §8)")
    return [((x - mean) / torch.sqrt(var + eps), message),
            ((x - mean) / (var.sqrt() + eps), message)]


def build() -> dict[str, dict]:
    x, mask = padded_batch()
    gen = seeded_generator(12)
    weights = torch.randn(4, generator=gen, dtype=F64)
    single = torch.tensor([[3.5, GARBAGE, GARBAGE]], dtype=F64)
    return {
        "mean_all": probe("masked_mean", x, mask),
        "mean_dim1": probe("masked_mean", x, mask, 1),
        "mean_dim0": probe("masked_mean", x, mask, dim=0),
        "mean_dim1_one_valid": probe("masked_mean", x[:2], ONE_VALID, 1),
        "mean_float_mask": probe("masked_mean", x, mask.to(F64)),
        "mean_nomask": probe("masked_mean", x[:3], grad=(0,)),
        "mean_nomask_dim": probe("masked_mean", x[:3], None, 1),
        "mean_grad": probe("masked_mean", x, mask, 1, grad=(0,), weights=weights),
        "mean_empty": probe("masked_mean", x, torch.zeros_like(mask)),
        "whiten": probe("masked_whiten", x, mask),
        "whiten_nomask": probe("masked_whiten", x[2:3]),
        "whiten_single": probe("masked_whiten", single, torch.tensor([[True, False, False]])),
        "whiten_one": probe("masked_whiten", torch.tensor([2.0], dtype=F64)),
        "whiten_const": probe("masked_whiten", torch.full((5,), 7.0, dtype=F64)),
        "whiten_keep_mean": probe("masked_whiten", x, mask, shift_mean=False),
    }


@pytest.fixture(scope="module")
def probes(launch):
    return run_probes(launch, build())


@pytest.mark.points(3)
@pytest.mark.exercises("masked_mean")
def test_masked_mean_ignores_padding(probes):
    x, mask = padded_batch()
    hint = said(hint="divide the sum over valid positions by their count (README §8)")
    close(result(probes, "mean_all", "masked_mean")["result"], ref_mean(x, mask),
          "masked_mean over all elements of a padded batch", hint)
    close(result(probes, "mean_dim1", "masked_mean")["result"], ref_mean(x, mask, 1),
          "masked_mean(dim=1) of a padded batch", hint)
    close(result(probes, "mean_dim0", "masked_mean")["result"], ref_mean(x, mask, 0),
          "masked_mean(dim=0) of a padded batch", hint)
    close(result(probes, "mean_dim1_one_valid", "masked_mean")["result"],
          ref_mean(x[:2], ONE_VALID, 1), "masked_mean(dim=1) of rows with 1 and 2 valid "
          "positions", hint)
    close(result(probes, "mean_float_mask", "masked_mean")["result"], ref_mean(x, mask),
          "masked_mean with a 0/1 float mask", "accept masks of any dtype holding 0 and 1")


@pytest.mark.points(2)
@pytest.mark.exercises("masked_mean")
def test_masked_mean_of_nothing_is_zero(probes):
    hint = said(
        hint="clamp the count to at least 1 so an all-padding selection gives 0 (README §8)")
    row = finite(result(probes, "mean_dim1", "masked_mean")["result"],
                 "masked_mean(dim=1) with a row that is all padding", hint)
    close(row[3], torch.tensor(0.0), "masked_mean(dim=1) of the all-padding row", hint)
    empty = finite(result(probes, "mean_empty", "masked_mean")["result"],
                   "masked_mean with an all-false mask", hint)
    close(empty, torch.tensor(0.0), "masked_mean with an all-false mask", hint)


@pytest.mark.points(2)
@pytest.mark.exercises("masked_mean")
def test_masked_mean_without_mask_and_gradient(probes):
    x, mask = padded_batch()
    got = result(probes, "mean_nomask", "masked_mean")
    close(got["result"], x[:3].mean(), "masked_mean(x) without a mask", "equals x.mean()")
    close(grad_of(got, 0, "masked_mean(x)", like=x[:3]), torch.full((3, 6), 1 / 18, dtype=F64),
          "gradient of masked_mean(x) w.r.t. x", "each element weighs 1/numel")
    close(result(probes, "mean_nomask_dim", "masked_mean")["result"], x[:3].mean(1),
          "masked_mean(x, None, dim=1)", "equals x.mean(1)")
    weights = torch.randn(4, generator=seeded_generator(12), dtype=F64)
    counts = mask.sum(1).clamp(min=1).to(F64)
    expected = torch.where(mask, (weights / counts)[:, None], 0.0)
    grad = grad_of(result(probes, "mean_grad", "masked_mean"), 0, "masked_mean", like=x)
    close(grad, expected, "gradient of masked_mean(dim=1) w.r.t. x",
          "padded positions get zero gradient; valid ones 1/count of their row")


@pytest.mark.points(3)
@pytest.mark.exercises("masked_whiten")
def test_masked_whiten_uses_valid_positions_only(probes):
    x, mask = padded_batch()
    what = "masked_whiten of a padded batch (valid positions)"
    got = finite(valid(result(probes, "whiten", "masked_whiten")["result"], mask, what), what)
    close(got, ref_whiten(x, mask)[mask], what,
          "one global masked mean and biased masked variance; padding must not enter (README §8)",
          slips=[(w[mask], m) for w, m in unbiased_whitens(x, mask)])
    row = x[2:3]
    close(result(probes, "whiten_nomask", "masked_whiten")["result"],
          (row - row.mean()) / torch.sqrt(row.var(unbiased=False) + 1e-8),
          "masked_whiten without a mask", "the variance divides by the count, not count - 1",
          slips=unbiased_whitens(row))


@pytest.mark.points(2)
@pytest.mark.exercises("masked_whiten")
def test_masked_whiten_single_element_is_finite(probes):
    const = (probes["whiten_const"].get("value") or {}).get("result")  # None if it raised
    const_finite = isinstance(const, torch.Tensor) and bool(torch.isfinite(const).all())
    # nan for one element but not for a constant batch: the variance divided by n - 1 = 0,
    # not a missing eps (0 / sqrt(0) would be nan for both).
    hint = said(hint=(
        "one valid element gives nan, a constant batch does not: you divide by n - 1 = 0 (the "
        "unbiased std, torch.std's default); divide the variance by the count (biased) and add "
        "eps before the square root (README §8)") if const_finite else (
        "add eps to the variance before the square root: one element or a constant batch has "
        "variance 0 (README §8)"))
    what = "masked_whiten with one valid element"
    keep = torch.tensor([[True, False, False]])
    single = finite(valid(result(probes, "whiten_single", "masked_whiten")["result"], keep,
                          what), what, hint)
    close(single, torch.zeros(1), what, hint)
    for key, what in (("whiten_one", "masked_whiten of a batch of one"),
                      ("whiten_const", "masked_whiten of a constant batch")):
        got = finite(result(probes, key, "masked_whiten")["result"], what, hint)
        close(got, torch.zeros_like(got, dtype=F64), what, hint)


@pytest.mark.points(1)
@pytest.mark.exercises("masked_whiten")
def test_masked_whiten_shift_mean_false_keeps_mean(probes):
    x, mask = padded_batch()
    what = "masked_whiten(shift_mean=False) on valid positions"
    got = valid(result(probes, "whiten_keep_mean", "masked_whiten")["result"], mask, what)
    close(got, ref_whiten(x, mask)[mask] + x[mask].mean(), what,
          "whiten, then add the masked mean back (README §8)",
          slips=[(w[mask] + x[mask].mean(), m) for w, m in unbiased_whitens(x, mask)])

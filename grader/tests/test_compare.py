"""grader.compare: the derived bounds hold for real float32 computations, with room to spare,
and still separate a wrong formula; assert_close judges and records margins."""

from __future__ import annotations

import math

import pytest
import torch

from grader import compare, seeds
from grader.compare import (
    MAX_MARGIN,
    TOLERANCES,
    Tolerance,
    assert_close,
    attention_bound,
    bound,
    gamma,
    margin_ratio,
    softmax_bound,
    sum_bound,
    take_margins,
    unit_roundoff,
)

F32, F64 = torch.float32, torch.float64


def test_unit_roundoff_and_gamma():
    assert unit_roundoff(F32) == 2.0 ** -24 == torch.finfo(F32).eps / 2
    assert unit_roundoff(F64) == torch.finfo(F64).eps / 2
    assert unit_roundoff(torch.bfloat16) == torch.finfo(torch.bfloat16).eps / 2
    assert unit_roundoff(torch.int64) == 0.0
    assert gamma(10, F32) == pytest.approx(10 * 2.0 ** -24, rel=1e-6)
    with pytest.raises(ValueError, match="no bound"):
        gamma(2 ** 24, F32)


def test_defaults_are_the_documented_derivations():
    assert TOLERANCES[F32] == bound(F32, depth=compare.DEFAULT_DEPTH)
    assert 1e-5 < TOLERANCES[F32].rtol < 2e-5
    assert TOLERANCES[F64].rtol < 1e-9
    assert compare.tolerance(torch.int32) == compare.EXACT


def max_error(got: torch.Tensor, exact: torch.Tensor) -> float:
    return float((got.double() - exact).abs().max())


def test_sum_bound_holds_for_every_order_and_thread_count():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 1000, generator=gen)
    exact = x.double().sum(dim=-1)
    magnitude = float(x.abs().sum(dim=-1).max())
    tol = sum_bound(F32, 1000, magnitude)
    for threads in (1, 2):
        torch.set_num_threads(threads)
        perm = torch.randperm(1000, generator=gen)
        for got in (x.sum(dim=-1), x[:, perm].sum(dim=-1), x.cumsum(dim=-1)[:, -1]):
            assert max_error(got, exact) <= MAX_MARGIN * tol.atol


def online_attention_f32(q, k, v, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Flash attention's recurrence in float32, one key block at a time ([seq, dim] each)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = torch.full((q.shape[0], 1), -math.inf)
    total = torch.zeros(q.shape[0], 1)
    acc = torch.zeros_like(q)
    for start in range(0, k.shape[0], block):
        s = (q @ k[start:start + block].T) * scale
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        rescale = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        total = total * rescale + p.sum(dim=-1, keepdim=True)
        acc = acc * rescale + p @ v[start:start + block]
        m = m_new
    return acc / total, (m + torch.log(total)).squeeze(-1)


@pytest.mark.parametrize("magnitude", [1.0, 4.0, 8.0])
@pytest.mark.parametrize("block", [1, 16])
def test_attention_bound_holds_for_an_online_softmax_with_large_scores(magnitude, block):
    gen = torch.Generator().manual_seed(int(magnitude * 10) + block)
    q, k = (torch.randn(70, 16, generator=gen) * magnitude for _ in range(2))
    v = torch.randn(70, 16, generator=gen)
    scores = q.double() @ k.double().T / 4.0
    exact_out = torch.softmax(scores, dim=-1) @ v.double()
    exact_lse = torch.logsumexp(scores, dim=-1)
    score_sum = float((q.double().abs() @ k.double().abs().T).max()) / 4.0
    common = {"head_dim": 16, "keys": 70, "score_sum": score_sum}
    out_tol = attention_bound(F32, **common, value_max=float(v.abs().max()))
    lse_tol = attention_bound(F32, **common, value_max=1.0)
    out, lse = online_attention_f32(q, k, v, block)
    assert margin_ratio(out, exact_out, out_tol) <= MAX_MARGIN
    assert margin_ratio(lse, exact_lse, lse_tol) <= MAX_MARGIN
    # ... and the bound is still far below a wrong formula's error (no rescale of the sum).
    assert out_tol.atol < 1e-2


def test_softmax_bound_holds_for_values_of_ten_thousand():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(8, 781, generator=gen) * 1e4
    spread = float((x.amax(-1) - x.amin(-1)).max())
    got = torch.softmax(x, dim=-1)
    assert margin_ratio(got, torch.softmax(x.double(), -1), softmax_bound(F32, 781, spread)) \
        <= MAX_MARGIN


def test_margin_ratio():
    tol = Tolerance(rtol=0.0, atol=0.1)
    assert margin_ratio(torch.tensor([1.0, 2.05]), torch.tensor([1.0, 2.0]), tol) == \
        pytest.approx(0.5)
    nan = torch.tensor([math.nan])
    assert margin_ratio(nan, nan, tol) == 0.0
    assert margin_ratio(torch.tensor([0.0]), nan, tol) == math.inf
    assert margin_ratio(torch.tensor([1.0]), torch.tensor([2.0]), compare.EXACT) == math.inf
    assert margin_ratio(torch.tensor([math.inf]), torch.tensor([math.inf]), tol) == 0.0


def test_assert_close_compares_a_float32_result_with_a_float64_reference():
    take_margins()
    expected = torch.tensor([1.0, 1.0 + 1e-12], dtype=F64)
    assert_close(torch.tensor([1.0, 1.0]), expected, what="out", dtype=F32)
    [margin] = take_margins()
    assert margin.what == "out" and margin.ratio < 1e-3
    with pytest.raises(AssertionError, match=r"^out: dtype torch.float64, expected torch.float32"):
        assert_close(expected, expected, what="out", dtype=F32)
    with pytest.raises(AssertionError, match=r"^out: differs from the reference by 0.001"):
        assert_close(torch.tensor([1.0, 1.001]), expected, what="out", dtype=F32)
    [margin] = take_margins()
    assert margin.ratio > 1
    assert_close(torch.tensor([1, 2]), torch.tensor([1, 2]), what="exact")
    assert take_margins() == []  # integers compare exactly: no margin to report


def test_assert_close_uses_a_given_bound():
    loose = Tolerance(rtol=0.0, atol=0.1)
    assert_close(torch.tensor([1.05]), torch.tensor([1.0]), what="x", tol=loose)
    with pytest.raises(AssertionError, match=r"tolerance for torch.float32: rtol=0, atol=0.1"):
        assert_close(torch.tensor([1.2]), torch.tensor([1.0]), what="x", tol=loose)



@pytest.mark.parametrize("actual, problem", [
    (None, "expected a tensor, got NoneType"),
    (torch.zeros(3), r"shape \(3,\), expected \(2,\)"),
    (torch.zeros(2, dtype=F64), "dtype torch.float64, expected torch.float32"),
    (torch.ones(2), "differs from the reference by 1"),
])
def test_hint_first_leads_every_message_with_the_fix(actual, problem):
    """Reports keep a first line's first 200 characters: with hint_first the fix comes right
    after what was compared, whatever went wrong (the default: the cause first); without it,
    after the problem."""
    expected = torch.zeros(2)
    with pytest.raises(AssertionError, match=rf"^y: swap the dims — {problem}"):
        assert_close(actual, expected, what="y", hint="swap the dims")
    with pytest.raises(AssertionError, match=rf"^y: {problem}.*; swap the dims"):
        assert_close(actual, expected, what="y", hint="swap the dims", hint_first=False)


def test_quoted_values_show_their_difference():
    """A 1.55e-07 difference is not "got -0.265118, expected -0.265118"."""
    from grader.compare import distinct

    assert distinct(-0.26511812, -0.26511827) == ("-0.2651181", "-0.2651183")
    assert distinct(1.0, 2.0) == ("1", "2") and distinct(0.5, 0.5) == ("0.5", "0.5")
    expected = torch.tensor([-0.26511812], dtype=F64)
    with pytest.raises(AssertionError, match=r"got -0.265118, expected -0.2651181"):
        assert_close(expected + 1.55e-7, expected, what="x", dtype=F64)

def test_seed_shift_changes_the_draw_and_travels_in_the_environment(monkeypatch):
    monkeypatch.delenv(seeds.SHIFT_VARIABLE, raising=False)
    first = torch.randn(3, generator=seeds.seeded_generator(5))
    assert torch.equal(first, torch.randn(3, generator=torch.Generator().manual_seed(5)))
    seeds.set_shift(2)
    assert seeds.current_shift() == 2 and seeds.shifted(5) != 5
    assert not torch.equal(first, torch.randn(3, generator=seeds.seeded_generator(5)))
    with pytest.raises(ValueError, match="non-negative int"):
        seeds.set_shift(-1)


def test_hypothesis_examples_are_the_same_on_every_run_and_move_with_the_seed_shift():
    from hypothesis import strategies as st

    from grader import seeds

    strategy = st.lists(seeds.drawn_integers(), min_size=1, max_size=5)
    first = seeds.hypothesis_examples(strategy, 20, seed=3)
    assert len(first) == 20 and first == seeds.hypothesis_examples(strategy, 20, seed=3)
    assert all(0 <= v < 2**40 for example in first for v in example)
    old = seeds.current_shift()
    try:
        seeds.set_shift(1)
        assert seeds.hypothesis_examples(strategy, 20, seed=3) != first
    finally:
        seeds.set_shift(old)

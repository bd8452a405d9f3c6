"""One block of attention with its log-sum-exp, and the exact merge (README §3), against plain
float64 attention computed in the parent. Read from rank 0 of the 2-rank launch.
"""

from __future__ import annotations

import pytest
import torch

from grader.suites.context_parallel._cases import expected, run, values
from grader.suites.context_parallel._ref import check

LAUNCH = "ring2"
SCALE_HINT = "scale the scores by 1/sqrt(dim) before the softmax"
LSE_HINT = "lse is the natural log of the sum of exp(scores) per row (log space, not the sum)"
GLOBAL_HINT = ("the causal mask compares global positions: query q_offset+i sees key "
               "k_offset+j iff k_offset+j <= q_offset+i")
EMPTY_HINT = "a row that sees no key must give out = 0 and lse = -inf, never nan"
MERGE_HINT = ("weight each part by exp(lse_part - lse) with lse = logaddexp(lse_a, lse_b); "
              "a plain average is exact only for equal normalisers")


def _attn(launch, impl, index: int) -> tuple[dict, dict]:
    got = values(run(launch, impl, LAUNCH), "attn")[0]
    return got[index], expected(LAUNCH, "attn")["calls"][index]


def _check_out(got: dict, want: dict, hint: str) -> None:
    what = f"attention_with_lse ({want['name']}) out"
    out = got["out"]
    if hint == SCALE_HINT and isinstance(out, torch.Tensor) and out.shape == want["out"].shape:
        q, k, v, causal, qo, ko = want["args"]
        from grader.suites.context_parallel._ref import full_attention

        unscaled = full_attention(q, k, v, causal, qo, ko, scale=1.0)[0]
        if torch.allclose(out.double(), unscaled, atol=1e-8):
            raise AssertionError(f"{what}: {SCALE_HINT} (got softmax(q @ kᵀ) @ v without it)")
    check(out, want["out"], what, dtype=want["dtype"], tol=want["tol"], hint=hint)


@pytest.mark.exercises("attention_with_lse")
@pytest.mark.points(2)
def test_attention_no_mask(launch, impl):
    got, want = _attn(launch, impl, 0)
    _check_out(got, want, SCALE_HINT)


@pytest.mark.exercises("attention_with_lse")
@pytest.mark.points(2)
def test_attention_lse_in_log_space(launch, impl):
    for index in (0, 1, 5):
        got, want = _attn(launch, impl, index)
        lse = got["lse"]
        what = f"attention_with_lse ({want['name']}) lse"
        if (isinstance(lse, torch.Tensor) and lse.shape == want["lse"].shape
                and torch.allclose(lse.double(), want["lse"].exp(), rtol=1e-6)):
            raise AssertionError(f"{what}: {LSE_HINT}; got exp(lse)")
        check(lse, want["lse"], what, dtype=want["dtype"], tol=want["tol"], hint=LSE_HINT)


@pytest.mark.exercises("attention_with_lse")
@pytest.mark.points(2)
def test_attention_causal_diagonal_block(launch, impl):
    got, want = _attn(launch, impl, 1)
    _check_out(got, want, "query i sees keys 0..i (the diagonal block of a causal mask)")


@pytest.mark.exercises("attention_with_lse")
@pytest.mark.points(2)
def test_attention_causal_global_offsets(launch, impl):
    got, want = _attn(launch, impl, 2)
    _check_out(got, want, GLOBAL_HINT)
    check(got["lse"], want["lse"], f"attention_with_lse ({want['name']}) lse",
          tol=want["tol"], hint=GLOBAL_HINT)


@pytest.mark.exercises("attention_with_lse")
@pytest.mark.points(1)
def test_attention_defaults_to_no_mask(launch, impl):
    got = values(run(launch, impl, LAUNCH), "attn default")[0]
    want = expected(LAUNCH, "attn default")
    check(got["out"], want["out"], "attention_with_lse(q, k, v) with default arguments",
          tol=want["tol"], hint="causal defaults to False and the offsets to 0")


@pytest.mark.exercises("attention_with_lse")
@pytest.mark.points(1)
def test_attention_rows_that_see_no_key(launch, impl):
    got, want = _attn(launch, impl, 3)
    what = f"attention_with_lse ({want['name']})"
    for part in ("out", "lse"):
        value = got[part]
        if isinstance(value, torch.Tensor) and bool(torch.isnan(value).any()):
            raise AssertionError(f"{what} {part} holds nan: {EMPTY_HINT}")
    _check_out(got, want, EMPTY_HINT)
    check(got["lse"], want["lse"], f"{what} lse", tol=want["tol"], hint=EMPTY_HINT)


@pytest.mark.exercises("attention_with_lse")
@pytest.mark.points(1)
def test_attention_dtype_float32(launch, impl):
    got, want = _attn(launch, impl, 4)
    _check_out(got, want, "compute in the input dtype (float32 in, float32 out)")
    check(got["lse"], want["lse"], f"attention_with_lse ({want['name']}) lse",
          dtype=torch.float32, tol=want["tol"], hint="lse keeps q's dtype")


@pytest.mark.exercises("attention_with_lse")
@pytest.mark.points(1)
def test_attention_large_scores(launch, impl):
    got, want = _attn(launch, impl, 5)
    for part in ("out", "lse"):
        value = got[part]
        if isinstance(value, torch.Tensor) and not bool(torch.isfinite(value).all()):
            raise AssertionError(f"attention_with_lse ({want['name']}) {part} overflowed: "
                                 f"subtract the row max before exp (or use torch.logsumexp)")
    _check_out(got, want, "subtract the row max before exp")


def _merges(launch, impl, index: int) -> tuple[dict, dict]:
    got = values(run(launch, impl, LAUNCH), "merge")[0]
    return got[index], expected(LAUNCH, "merge")["calls"][index]


def _check_merge(got: dict, want: dict, grouping: str) -> None:
    out, lse = got[grouping]
    what = f"merge ({want['name']}, grouped {'left' if grouping == 'left' else 'right'} first)"
    if isinstance(out, torch.Tensor) and bool(torch.isnan(out).any()):
        raise AssertionError(f"{what} out holds nan: a side with lse = -inf contributes "
                             f"nothing; both -inf give out 0 and lse -inf")
    check(lse, want["lse"], f"{what} lse", tol=want["tol"], hint=MERGE_HINT)
    check(out, want["out"], f"{what} out", tol=want["tol"], hint=MERGE_HINT)


@pytest.mark.exercises("merge")
@pytest.mark.points(2)
def test_merge_two_blocks(launch, impl):
    got, want = _merges(launch, impl, 0)
    _check_merge(got, want, "left")


@pytest.mark.exercises("merge")
@pytest.mark.points(1)
@pytest.mark.parametrize("grouping", ["left", "right"], ids=["((a,b),c)", "(a,(b,c))"])
def test_merge_is_associative(launch, impl, grouping):
    got, want = _merges(launch, impl, 1)
    _check_merge(got, want, grouping)


@pytest.mark.exercises("merge")
@pytest.mark.points(2)
def test_merge_causal_blocks_with_empty_rows(launch, impl):
    got, want = _merges(launch, impl, 2)
    _check_merge(got, want, "left")
    _check_merge(got, want, "right")

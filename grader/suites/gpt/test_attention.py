"""attention (14 points): causal and full attention in float64 and float32 (non-contiguous),
float16/bfloat16 inputs with the softmax in float32,
grouped-query heads equal to attention over K/V heads repeated in place, decode-shaped causal
attention (fewer queries than keys), causality as a property, and clear errors."""

from __future__ import annotations

import math

import pytest
import torch

from grader.compare import Tolerance, attention_bound, unit_roundoff
from grader.suites.gpt._cases import F32, F64, probe, randn, register, shared_probes
from grader.suites.gpt._ref import ref_attention
from grader.suites.gpt._ref_checks import close, error_type, grad_value, result, said

Q, K, V = randn(401, 2, 3, 9, 8), randn(402, 2, 3, 9, 8), randn(403, 2, 3, 9, 8)
GQ, GK, GV = randn(404, 1, 6, 7, 4), randn(405, 1, 2, 7, 4), randn(406, 1, 2, 7, 4)
DQ, DK, DV = randn(407, 2, 4, 3, 8), randn(408, 2, 2, 10, 8), randn(409, 2, 2, 10, 8)
G = randn(410, 2, 3, 9, 8)
# Half-precision inputs whose scores share a large common part (q·k ≈ 64 on every key, a
# spread of a few units): the softmax ignores it, but a score rounded to float16/bfloat16 is
# off by u·64 (0.03 / 0.25), which moves every weight; in float32 it is off by 4e-6.
HQ, HK, HV = randn(431, 1, 4, 24, 16), randn(432, 1, 2, 24, 16), randn(433, 1, 2, 24, 16)
HQ[..., 0], HK[..., 0] = 16.0, 16.0
HALF = (torch.float16, torch.bfloat16)
FUTURE_AT = 4  # keys and values after this position are replaced in the "future" probe

DIAGONAL = said(hint=("a query must see its own key: the causal mask keeps the diagonal "
                      "(key position <= query position) (README §5.4)"))
HALF_SOFTMAX = said(hint=("for float16/bfloat16 inputs compute the scores, the softmax and "
                          "the weighted sum in float32, and return q's dtype (README §5.4)"))
SCALE = said(hint="scale the scores by 1/sqrt(head_dim), not 1/head_dim (README §5.4)")
INTERLEAVE = said(hint=("query head h reads K/V head h // (n_heads // n_kv_heads): repeat "
                        "each K/V head in place (repeat_interleave), not tile them (repeat) "
                        "(README §5.4)"))
OFFSET = said(hint=("with fewer queries than keys, query i sits at position seq_k - seq_q + i: "
                    "the mask is tril(diagonal=seq_k - seq_q), the queries being the last "
                    "seq_q positions (README §5.4)"))


def slips(q, k, v, causal) -> tuple[tuple[torch.Tensor, str], ...]:
    d = q.shape[-1]
    found = [(ref_attention(q, k, v, causal, scale=1 / d), SCALE)]
    if causal:
        found.append((ref_attention(q, k, v, causal, diagonal=False), DIAGONAL))
        sq, sk = q.shape[-2], k.shape[-2]
        if sq < sk:  # the mask of a square problem applied to the first seq_q keys
            s = (q.to(F64) @ k.to(F64).repeat_interleave(q.shape[1] // k.shape[1], 1)
                 .transpose(-1, -2)) / math.sqrt(d)
            s = s.masked_fill(~torch.ones(sq, sk, dtype=torch.bool).tril(), float("-inf"))
            found.append((torch.softmax(s, -1) @ v.to(F64).repeat_interleave(
                q.shape[1] // k.shape[1], 1), OFFSET))
    if q.shape[1] != k.shape[1]:
        found.append((ref_attention(q, k, v, causal, kv_map="tiled"), INTERLEAVE))
    return tuple(found)


def future_changed() -> tuple[torch.Tensor, torch.Tensor]:
    k, v = K.clone(), V.clone()
    k[..., FUTURE_AT + 1:, :] = randn(411, 2, 3, 9 - FUTURE_AT - 1, 8) * 3
    v[..., FUTURE_AT + 1:, :] = randn(412, 2, 3, 9 - FUTURE_AT - 1, 8) * 3
    return k, v


def build() -> dict[str, dict]:
    fk, fv = future_changed()
    return {
        "causal": probe("attention", Q, K, V, True, grad=(0, 1, 2), weights=G),
        "default": probe("attention", Q, K, V),
        "full_f32": probe("attention", Q, K, V, False, dtype=F32, layout="transposed"),
        "causal_f32": probe("attention", Q, K, V, True, dtype=F32, layout="strided"),
        **{f"half_{str(dtype)[6:]}": probe("attention", HQ, HK, HV, True, dtype=dtype)
           for dtype in HALF},
        "gqa": probe("attention", GQ, GK, GV, True),
        "gqa_full": probe("attention", GQ, GK, GV, False),
        "decode": probe("attention", DQ, DK, DV, True),
        "decode_one": probe("attention", DQ[:, :, -1:], DK, DV, True),
        "future": probe("attention", Q, fk, fv, True),
        "bad_heads": probe("attention", randn(413, 1, 3, 4, 4), randn(414, 1, 2, 4, 4),
                           randn(415, 1, 2, 4, 4), False),
        "bad_causal": probe("attention", randn(416, 1, 2, 5, 4), randn(417, 1, 2, 3, 4),
                            randn(418, 1, 2, 3, 4), True),
        "bad_kv": probe("attention", randn(419, 1, 2, 4, 4), randn(420, 1, 2, 4, 4),
                        randn(421, 1, 2, 5, 4), False),
    }


TAG = register("attention", build())


@pytest.fixture(scope="module")
def probes(launch, impl):
    return shared_probes(launch, impl, TAG)


def f32_tol(q, k, v):
    return attention_bound(F32, head_dim=q.shape[-1], keys=k.shape[-2],
                           score_sum=float((q.abs() @ k.abs().transpose(-1, -2)).max())
                           / math.sqrt(q.shape[-1]), value_max=float(v.abs().max()))


@pytest.mark.points(2)
@pytest.mark.exercises("attention")
def test_causal_attention_float64(probes):
    what = "attention(q, k, v, causal=True), [2, 3, 9, 8] float64"
    got = result(probes, "causal", what)
    close(got["result"], ref_attention(Q, K, V, True), what, dtype=F64,
          hint="softmax(q kᵀ / sqrt(d) + causal mask) v (README §5.4)",
          slips=slips(Q, K, V, True))
    what = "attention(q, k, v) with the default causal=True"
    close(result(probes, "default", what)["result"], ref_attention(Q, K, V, True), what,
          dtype=F64, hint="causal defaults to True (README §5.4)")
    leaves = [t.clone().requires_grad_(True) for t in (Q, K, V)]
    grads = torch.autograd.grad((ref_attention(*leaves, True) * G).sum(), leaves)
    for i, name in enumerate("qkv"):
        close(grad_value(got, i, "attention"), grads[i], f"gradient of attention w.r.t. {name}",
              dtype=F64, hint="keep it differentiable")


@pytest.mark.points(2)
@pytest.mark.exercises("attention")
def test_attention_float32_non_contiguous(probes):
    for key, causal, layout in (("full_f32", False, "transposed"),
                                ("causal_f32", True, "strided")):
        what = f"attention(causal={causal}) on {layout} float32 [2, 3, 9, 8]"
        close(result(probes, key, what)["result"], ref_attention(Q, K, V, causal), what,
              dtype=F32, tol=f32_tol(Q, K, V), slips=slips(Q, K, V, causal),
              hint="the result must not depend on the memory layout")


def half_tol(dtype: torch.dtype, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             ) -> Tolerance:
    """float32 attention (`f32_tol`), then one rounding of the output to `dtype` (u·|out|),
    and the weights rounded to `dtype` before the product with v if the code does so
    (u·max|v|): what a float32 softmax may cost. Scores rounded to `dtype` cost far more."""
    u, f32 = unit_roundoff(dtype), f32_tol(q, k.repeat_interleave(2, 1), v)
    return Tolerance(rtol=u + f32.rtol, atol=u * float(v.abs().max()) + f32.atol)


@pytest.mark.points(1)
@pytest.mark.exercises("attention")
def test_half_precision_attention_softmax_in_float32(probes):
    for dtype in HALF:
        q, k, v = (t.to(dtype) for t in (HQ, HK, HV))
        what = f"attention(causal=True) on {str(dtype)[6:]} inputs [1, 4, 24, 16]"
        got = result(probes, f"half_{str(dtype)[6:]}", what)["result"]
        close(got, ref_attention(q, k, v, True), what, dtype=dtype,
              tol=half_tol(dtype, q, k, v), hint=HALF_SOFTMAX, slips=slips(q, k, v, True))


@pytest.mark.points(3)
@pytest.mark.exercises("attention")
def test_grouped_query_heads_share_kv_in_place(probes):
    for key, causal in (("gqa", True), ("gqa_full", False)):
        what = f"attention(causal={causal}), 6 query heads over 2 K/V heads"
        close(result(probes, key, what)["result"], ref_attention(GQ, GK, GV, causal), what,
              dtype=F64, hint=INTERLEAVE, slips=slips(GQ, GK, GV, causal))


@pytest.mark.points(3)
@pytest.mark.exercises("attention")
def test_causal_queries_are_the_last_positions(probes):
    for key, q in (("decode", DQ), ("decode_one", DQ[:, :, -1:])):
        what = f"attention(causal=True), {q.shape[-2]} queries over 10 keys (4 over 2 heads)"
        close(result(probes, key, what)["result"], ref_attention(q, DK, DV, True), what,
              dtype=F64, hint=OFFSET, slips=slips(q, DK, DV, True))


@pytest.mark.points(2)
@pytest.mark.exercises("attention")
def test_causal_output_ignores_future_keys(probes):
    base = result(probes, "causal", "attention(causal=True)")["result"]
    changed = result(probes, "future", "attention(causal=True) with keys after 4 replaced")
    changed = changed["result"]
    if not isinstance(changed, torch.Tensor) or changed.shape != base.shape:
        raise AssertionError("attention(causal=True): expected a [2, 3, 9, 8] tensor")
    close(changed[..., :FUTURE_AT + 1, :], base[..., :FUTURE_AT + 1, :].to(F64),
          f"causal attention at positions 0..{FUTURE_AT} after keys/values {FUTURE_AT + 1}.. "
          f"changed", dtype=F64, hint=("position t must not see any key after t: mask "
                                       "them with -inf before the softmax (README §5.4)"))


@pytest.mark.points(1)
@pytest.mark.exercises("attention")
def test_attention_rejects_bad_shapes(probes):
    for key, what in (("bad_heads", "attention with 3 query heads over 2 K/V heads"),
                      ("bad_causal", "attention(causal=True) with 5 queries over 3 keys"),
                      ("bad_kv", "attention with k of 4 positions and v of 5")):
        kind = error_type(probes, key, what)
        assert kind == "ValueError", (
            f"{what} should raise ValueError, "
            f"{'returned a value' if kind is None else 'raised ' + kind} (README §5.4)")

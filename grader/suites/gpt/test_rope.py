"""Rotary embeddings (10 points): rotate_half's layout, the cos/sin tables, rotation at given
positions (per sequence and per batch row, different head counts for q and k), and the property
RoPE exists for: a rotated query-key score depends only on the distance between positions."""

from __future__ import annotations

import pytest
import torch

from grader.compare import bound
from grader.suites.gpt._cases import F32, F64, probe, randn, register, shared_probes, special
from grader.suites.gpt._ref import interleaved_rotate, ref_rope_tables, ref_rotate, ref_rotate_half
from grader.suites.gpt._ref_checks import close, result, said

HALVES = said(hint=("rotate_half pairs element i with element i + d/2 (the two halves: "
                    "[1, 2, 3, 4] -> [-3, -4, 1, 2]), not neighbours (GPT-J's interleaved "
                    "layout) (README §5.2)"))
X = randn(201, 2, 3, 5, 10)
Q = randn(202, 2, 4, 6, 8)
K = randn(203, 2, 2, 6, 8)
POS = torch.tensor([3, 0, 7, 11, 5, 2])
POS_ROWS = torch.tensor([[0, 1, 2, 3, 4, 5], [10, 11, 12, 13, 14, 15]])
BASE = 500.0
LENGTH, DIM = 40, 12
SCORE_Q, SCORE_K = randn(204, 8), randn(205, 8)


def build() -> dict[str, dict]:
    cos, sin = ref_rope_tables(16, 8, BASE)
    return {
        "rotate": probe("rotate_half", X),
        "rotate_strided": probe("rotate_half", X, dtype=F32, layout="strided"),
        "cache_f64": probe("rope_cache", LENGTH, DIM, BASE, F64),
        "cache_f32": probe("rope_cache", LENGTH, DIM),  # the defaults: base 10000, float32
        "apply": probe("apply_rotary_pos_emb", Q, K, cos, sin, POS),
        "apply_rows": probe("apply_rotary_pos_emb", Q, K, cos, sin, POS_ROWS, dtype=F32,
                            layout="transposed"),
        "apply_default": probe("apply_rotary_pos_emb", Q, K, cos, sin),
        "scores": special("rope_scores", head_dim=8, length=24, base=BASE, q=SCORE_Q,
                          k=SCORE_K),
    }


TAG = register("rope", build())


@pytest.fixture(scope="module")
def probes(launch, impl):
    return shared_probes(launch, impl, TAG)


@pytest.mark.points(3)
@pytest.mark.exercises("rotate_half")
def test_rotate_half_pairs_the_halves(probes):
    what = "rotate_half on [2, 3, 5, 10]"
    close(result(probes, "rotate", what)["result"], ref_rotate_half(X), what, dtype=F64,
          hint=HALVES, slips=((interleaved_rotate(X), HALVES),))
    what = "rotate_half on a strided float32 [2, 3, 5, 10]"
    close(result(probes, "rotate_strided", what)["result"], ref_rotate_half(X), what, dtype=F32,
          hint=HALVES, slips=((interleaved_rotate(X), HALVES),))


@pytest.mark.points(3)
@pytest.mark.exercises("rope_cache")
def test_rope_cache_tables(probes):
    for key, base, dtype in (("cache_f64", BASE, F64), ("cache_f32", 10000.0, F32)):
        what = (f"rope_cache({LENGTH}, {DIM}, base={base:g}, dtype={dtype})" if dtype == F64
                else f"rope_cache({LENGTH}, {DIM}) with the default base and dtype")
        got = result(probes, key, what)["result"]
        if not isinstance(got, (list, tuple)) or len(got) != 2:
            raise AssertionError(f"{what}: expected a tuple (cos, sin)")
        cos, sin = ref_rope_tables(LENGTH, DIM, base)
        hint = said(hint=("angle = position * base ** (-2i / head_dim), the same frequencies "
                          "in both halves, computed in float64 (README §5.2)"))
        close(got[0], cos, f"cos of {what}", dtype=dtype, hint=hint)
        close(got[1], sin, f"sin of {what}", dtype=dtype, hint=hint)


@pytest.mark.points(2)
@pytest.mark.exercises("apply_rotary_pos_emb")
def test_apply_rotary_at_given_positions(probes):
    hint = said(hint=("x * cos[positions] + rotate_half(x) * sin[positions], broadcast over "
                      "the head axis (README §5.2)"))
    for key, positions, dtype in (("apply", POS, F64), ("apply_rows", POS_ROWS, F32),
                                  ("apply_default", torch.arange(6), F64)):
        what = f"apply_rotary_pos_emb, q [2, 4, 6, 8], k [2, 2, 6, 8], positions " \
               f"{'None' if key == 'apply_default' else list(positions.shape)}"
        got = result(probes, key, what)["result"]
        if not isinstance(got, (list, tuple)) or len(got) != 2:
            raise AssertionError(f"{what}: expected a tuple (q_rotated, k_rotated)")
        close(got[0], ref_rotate(Q, positions, BASE), f"q of {what}", dtype=dtype, hint=hint)
        close(got[1], ref_rotate(K, positions, BASE), f"k of {what}", dtype=dtype, hint=hint)


@pytest.mark.points(2)
@pytest.mark.exercises("rope_cache", "apply_rotary_pos_emb", "rotate_half")
def test_rotated_scores_depend_only_on_the_distance(probes):
    scores = result(probes, "scores", "q·k of rotated vectors at positions 0..23")
    if not isinstance(scores, torch.Tensor) or scores.shape != (24, 24):
        raise AssertionError("q·k of rotated vectors: expected a [24, 24] tensor of scores")
    # score(m, n) must equal score(m + s, n + s): compare every diagonal with its first entry
    tol = bound(F64, depth=64, magnitude=float(SCORE_Q.abs().sum() * SCORE_K.abs().max()))
    for offset in range(-23, 24):
        diag = torch.diagonal(scores, offset)
        close(diag, diag[:1].expand_as(diag).clone(), f"scores q_m·k_n at n - m = {offset}",
              dtype=F64, tol=tol,
              hint=("RoPE makes q_m·k_n depend on n - m only; rotate q and k with the same "
                    "tables, pairing element i with i + d/2 (README §5.2)"))

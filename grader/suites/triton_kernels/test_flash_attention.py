"""flash_attention (hidden, 23 points): out and lse, causal or not, ragged sequence lengths.

Sequence lengths (1, 9, 20, 37, 50, 70, 100) are not multiples of any block size a kernel is
likely to pick, so the last key and query blocks are partial. Every case runs in one launch
(Triton's interpreter, CPU, float32) against a float64 reference built from the explicit score
matrix, within the bound `grader.compare.attention_bound` derives from each case's inputs
(float32 rounding of the scores, the online softmax's rescales and the sums over keys).
"""

from __future__ import annotations

from typing import Any

import torch

from grader.seeds import seeded_generator
from grader.suites.triton_kernels._cases import case_tests
from grader.suites.triton_kernels._ref import Case, attention_ref, attention_tolerances

ONLINE_HINT = ("when the running max grows, rescale both the running sum and the accumulator "
               "by exp(old max - new max)")
CAUSAL_HINT = "query i sees keys j <= i (j == i included), and padded keys never"


def build_cases() -> dict[str, Case]:
    gen = seeded_generator(40)

    def case(key: str, shape: tuple[int, ...], what: str = "", causal: bool = False,
             k_seq: int | None = None, scale: float | None = None, magnitude: float = 1.0,
             layout: str = "contiguous", hint: str = ONLINE_HINT,
             loud_queries: int = 0) -> tuple[str, Case]:
        q = torch.randn(*shape, generator=gen) * magnitude
        q[..., :loud_queries, :] *= 100.0  # scores of these rows dwarf the others'
        kv_shape = shape[:2] + (k_seq or shape[2], shape[3])
        k = torch.randn(*kv_shape, generator=gen) * magnitude
        v = torch.randn(*kv_shape, generator=gen)
        kwargs: dict[str, Any] = {"causal": causal} if causal else {}
        if scale is not None:
            kwargs["scale"] = scale
        shapes = f"q {list(shape)}" + (f", k/v seq {k_seq}" if k_seq else "")
        name = f"flash_attention({'causal, ' if causal else ''}{shapes}){what}"
        return key, Case(name, "flash_attention", (q, k, v), attention_ref(q, k, v, causal, scale),
                         kwargs=kwargs, layout=layout, hint=CAUSAL_HINT if causal else hint,
                         tol=attention_tolerances(q, k, v, scale))

    return dict([
        case("seq1", (1, 2, 1, 16)),
        case("seq1_causal", (1, 2, 1, 16), causal=True),
        case("dense", (1, 2, 100, 32)),
        case("causal", (1, 2, 100, 32), causal=True),
        case("causal37", (1, 1, 37, 16), causal=True),
        case("dim24", (1, 1, 50, 24), " (dim 24)",
             hint="mask the head dim too when it is not a power of two"),
        case("cross", (1, 2, 20, 16), k_seq=70),
        case("large", (1, 1, 70, 16), " with scores of magnitude ~100", magnitude=4.0),
        case("scale", (1, 1, 20, 16), " with scale=0.3", scale=0.3,
             hint="use the given scale; 1/sqrt(dim) only when scale is None"),
        case("bshd", (1, 3, 37, 16), " on [batch, seq, heads, dim] storage", layout="bshd",
             hint="address q, k, v with their strides, not a contiguous layout"),
        case("batched", (2, 3, 9, 16), " (batch and heads)",
             hint="each (batch, head) pair needs its own offsets into q, k, v, out and lse"),
        case("one", (1, 1, 1, 1), " (one element each)",
             hint="a single query of dim 1 still needs its kernel launch"),
        case("rows_apart", (1, 1, 20, 16), " with 4 queries 100x larger than the others",
             loud_queries=4,
             hint="the running max is per query row: the max over the keys (axis 1) of each "
                  "row's scores"),
        case("dim256", (1, 2, 3, 256), " (dim 256, the largest)",
             hint="dims up to 256 are accepted; only larger ones raise ValueError"),
        case("padded", (1, 2, 37, 24), " on slices of NaN-padded tensors", layout="padded",
             hint="read only rows < seq and columns < dim of q, k and v: mask both, and "
                  "address the inputs with their strides"),
    ])


FLASH = case_tests("flash_attention", build_cases())
case_runs = FLASH.fixture


test_single_query = FLASH.test(1, "seq1", "seq1_causal", "one")
test_non_causal_out = FLASH.test(2, "dense", check_lse=False)
test_non_causal_lse = FLASH.test(3, "dense", check_out=False)
test_causal_out = FLASH.test(2, "causal", check_lse=False)
test_causal_lse = FLASH.test(2, "causal", check_out=False)
test_causal_seq_37 = FLASH.test(2, "causal37")
test_head_dim_not_power_of_two = FLASH.test(2, "dim24")
test_seq_q_differs_from_seq_k = FLASH.test(2, "cross")
test_large_scores_stable = FLASH.test(2, "large", "rows_apart")
test_explicit_scale = FLASH.test(1, "scale")
test_non_contiguous_layout = FLASH.test(2, "bshd", "padded")
test_batch_and_heads = FLASH.test(1, "batched")
test_head_dim_256 = FLASH.test(1, "dim256")

"""Bad shapes (hidden, 4 points): every wrapper raises ValueError for what its Raises names.

Each call below breaks one rule of the stub's docstring (a tensor of the wrong rank, a row
wider than 16384, a `dim` outside 1..256, a tensor whose sizes do not match the others',
causal with seq_q != seq_k). Every input is small and in bounds for the sizes the other
arguments give, so a wrapper that skips a check returns a result instead of raising. All the
calls run in one launch (Triton's interpreter, CPU), each under the guard, in its own error
scope.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from grader.seeds import seeded_generator
from grader.suites.triton_kernels._cases import paged_inputs, run
from grader.suites.triton_kernels._ref import Case
from harness.cases import case_value


def build_cases() -> dict[str, list[Case]]:
    """function -> its bad calls; each Case's name says what is wrong with it."""
    gen = seeded_generator(70)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    def bad(function: str, what: str, *args: Any, **kwargs: Any) -> Case:
        return Case(f"{function} with {what}", function, args, None, kwargs=kwargs)

    q, k, v = randn(1, 2, 4, 16), randn(1, 2, 4, 16), randn(1, 2, 4, 16)
    pq, kc, vc, tables, lens = paged_inputs(gen, [5, 9], block_size=4)
    blocks, block_size, heads, dim = kc.shape
    return {
        "softmax": [
            bad("softmax", "a 1-D x [6]", randn(6)),
            bad("softmax", "a 3-D x [2, 3, 4]", randn(2, 3, 4)),
            bad("softmax", "rows 16385 wide", randn(1, 16385)),
        ],
        "rms_norm": [
            bad("rms_norm", "a 1-D x [6]", randn(6), randn(6)),
            bad("rms_norm", "weight [7] for x [3, 8]", randn(3, 8), randn(7)),
            bad("rms_norm", "weight [9] for x [3, 8]", randn(3, 8), randn(9)),
            bad("rms_norm", "a 2-D weight [1, 8] for x [3, 8]", randn(3, 8), randn(1, 8)),
            bad("rms_norm", "rows 16385 wide", randn(1, 16385), randn(16385)),
        ],
        "flash_attention": [
            bad("flash_attention", "a 3-D q [2, 4, 16]", randn(2, 4, 16), k, v),
            bad("flash_attention", "3-D k and v [1, 2, 4]", q, randn(1, 2, 4), randn(1, 2, 4)),
            bad("flash_attention", "v longer than k (seq 6 and 4)", q, k, randn(1, 2, 6, 16)),
            bad("flash_attention", "k and v of batch 2, q of batch 1", q, randn(2, 2, 4, 16),
                randn(2, 2, 4, 16)),
            bad("flash_attention", "k and v of 3 heads, q of 2", q, randn(1, 3, 4, 16),
                randn(1, 3, 4, 16)),
            bad("flash_attention", "k and v of dim 8, q of dim 16", q, randn(1, 2, 4, 8),
                randn(1, 2, 4, 8)),
            bad("flash_attention", "causal=True, seq_q 4 and seq_k 7", q, randn(1, 2, 7, 16),
                randn(1, 2, 7, 16), causal=True),
            bad("flash_attention", "dim 257", randn(1, 1, 2, 257), randn(1, 1, 2, 257),
                randn(1, 1, 2, 257)),
            bad("flash_attention", "dim 0", randn(1, 1, 2, 0), randn(1, 1, 2, 0),
                randn(1, 1, 2, 0)),
        ],
        "paged_attention_decode": [
            bad("paged_attention_decode", "a 4-D q", pq[..., None], kc, vc, tables, lens),
            bad("paged_attention_decode", "3-D caches", pq, kc[..., 0], vc[..., 0], tables,
                lens),
            bad("paged_attention_decode", "a v_cache of one more block than k_cache", pq, kc,
                randn(blocks + 1, block_size, heads, dim), tables, lens),
            bad("paged_attention_decode", f"caches of {heads + 1} heads, q of {heads}", pq,
                randn(blocks, block_size, heads + 1, dim),
                randn(blocks, block_size, heads + 1, dim), tables, lens),
            bad("paged_attention_decode", f"caches of dim {dim // 2}, q of dim {dim}", pq,
                randn(blocks, block_size, heads, dim // 2),
                randn(blocks, block_size, heads, dim // 2), tables, lens),
            bad("paged_attention_decode", "block_tables of one more row than the batch", pq, kc,
                vc, torch.cat([tables, tables[:1]]), lens),
            bad("paged_attention_decode", "a 1-D block_tables", pq, kc, vc, tables[:, 0], lens),
            bad("paged_attention_decode", "context_lens of one more entry than the batch", pq,
                kc, vc, tables, torch.cat([lens, lens[:1]])),
        ],
    }


CASES = build_cases()


@pytest.fixture(scope="module")
def results(launch: Any) -> dict[str, dict[str, Any]]:
    return run(launch, [case for cases in CASES.values() for case in cases])


def raised(case: Case, result: dict[str, Any]) -> None:
    """Pass when the call raised ValueError; a stub's NotImplementedError is re-raised as
    not implemented."""
    error = result.get("error") or {}
    if result.get("ok"):
        raise AssertionError(f"{case.name}: returned a result; the stub's Raises says this "
                             f"must raise ValueError (check shapes before launching)")
    if error.get("not_implemented"):
        case_value(result, case.name)
    if error.get("type") != "ValueError":
        raise AssertionError(f"{case.name}: raised {error.get('type')}: "
                             f"{str(error.get('message', ''))[:200]}; expected ValueError")


def check_raises(results: dict[str, dict[str, Any]], function: str) -> None:
    for case in CASES[function]:
        raised(case, results[case.name])


@pytest.mark.exercises("softmax")
@pytest.mark.points(1)
def test_softmax_bad_shapes_raise(results):
    check_raises(results, "softmax")


@pytest.mark.exercises("rms_norm")
@pytest.mark.points(1)
def test_rms_norm_bad_shapes_raise(results):
    check_raises(results, "rms_norm")


@pytest.mark.exercises("flash_attention")
@pytest.mark.points(1)
def test_flash_attention_bad_shapes_raise(results):
    check_raises(results, "flash_attention")


@pytest.mark.exercises("paged_attention_decode")
@pytest.mark.points(1)
def test_paged_attention_decode_bad_shapes_raise(results):
    check_raises(results, "paged_attention_decode")

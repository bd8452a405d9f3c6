"""Compiled kernels on a GPU (hidden, 10 points; skipped with a reason without CUDA).

Values: a few float32 cases of every wrapper, compiled by Triton for the GPU, against float64
references (4 points). Speed: each kernel and its torch counterpart timed alternately in one
rank process by grader.bench.triton_kernels, graded as the ratio kernel time / torch time with
wide margins, so only a kernel that is not fused, not tiled or not parallel fails (6 points).
"""

from __future__ import annotations

import pytest
import torch

from grader.bench.triton_kernels import bench_rank
from grader.seeds import seeded_generator
from grader.suites.triton_kernels._cases import paged_inputs
from grader.suites.triton_kernels._ranks import rank_cases_on_gpu
from grader.suites.triton_kernels._ref import (
    Case,
    attention_ref,
    attention_tolerances,
    check,
    paged_ref,
    paged_tolerances,
    rms_norm_ref,
    softmax_ref,
    softmax_tolerance,
)

pytestmark = pytest.mark.gpu

COMPILED_ENV = {"TRITON_INTERPRET": "0"}
GPU_TIMEOUT_S = 300.0
# Kernel time / torch time must stay at or below these (README §9).
MAX_RATIOS = {"softmax": 2.0, "rms_norm": 2.0, "flash_attention": 4.0,
              "flash_attention causal": 4.0}


def build_cases() -> dict[str, Case]:
    gen = seeded_generator(60)
    x = torch.randn(300, 781, generator=gen) * 50
    w = torch.randn(781, generator=gen)
    q, k, v = (torch.randn(2, 4, 333, 64, generator=gen) for _ in range(3))
    paged = paged_inputs(gen, [1, 16, 100, 257], block_size=16, heads=4, dim=64)
    return {
        "softmax": Case("compiled softmax on [300, 781] float32", "softmax", (x,),
                        softmax_ref(x), tol=softmax_tolerance(x)),
        "rms_norm": Case("compiled rms_norm on [300, 781] float32", "rms_norm", (x, w),
                         rms_norm_ref(x, w, 1e-6)),
        "flash_attention": Case("compiled flash_attention(causal, q [2, 4, 333, 64]) float32",
                                "flash_attention", (q, k, v), attention_ref(q, k, v, True),
                                kwargs={"causal": True}, tol=attention_tolerances(q, k, v),
                                hint="use tl.dot(..., input_precision='ieee') for float32"),
        "paged_attention_decode": Case("compiled paged_attention_decode(lengths [1, 16, 100, "
                                       "257]) float32", "paged_attention_decode", paged,
                                       paged_ref(*paged), tol=paged_tolerances(*paged)),
    }


CASES = build_cases()


@pytest.fixture(scope="module")
def compiled(launch):
    cases = list(CASES.values())
    result = launch(rank_cases_on_gpu, 1, args=([c.payload() for c in cases],),
                    env=COMPILED_ENV, timeout=GPU_TIMEOUT_S)
    return {case.name: value for case, value in zip(cases, result.values[0])}


@pytest.fixture(scope="module")
def ratios(launch):
    result = launch(bench_rank, 1, kwargs={"names": list(MAX_RATIOS)}, env=COMPILED_ENV,
                    timeout=GPU_TIMEOUT_S)
    return result.values[0]


@pytest.mark.points(1)
@pytest.mark.parametrize("function", [
    pytest.param(name, marks=pytest.mark.exercises(name), id=f"function={name}") for name in CASES])
def test_compiled_values(compiled, function):
    case = CASES[function]
    check(case, compiled[case.name])


def _check_ratio(ratios, name: str) -> None:
    row = ratios[name]
    limit = MAX_RATIOS[name]
    assert row["ratio"] <= limit, (
        f"{name} takes {row['ratio']:.2f}x the time of its torch counterpart "
        f"({row['kernel_ms']:.3f} ms vs {row['torch_ms']:.3f} ms); at most {limit:g}x passes. "
        f"Is every row / block a parallel program, and is the input read only once?")


@pytest.mark.exercises("softmax")
@pytest.mark.points(2)
def test_softmax_speed(ratios):
    _check_ratio(ratios, "softmax")


@pytest.mark.exercises("rms_norm")
@pytest.mark.points(2)
def test_rms_norm_speed(ratios):
    _check_ratio(ratios, "rms_norm")


@pytest.mark.exercises("flash_attention")
@pytest.mark.points(2)
def test_flash_attention_speed(ratios):
    _check_ratio(ratios, "flash_attention")
    _check_ratio(ratios, "flash_attention causal")

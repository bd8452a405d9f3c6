"""Discipline (hidden, 8 points): each wrapper launches kernels and leaves its inputs alone.

One small call per wrapper runs under `harness.compute_guard.ComputeGuard`: a wrapper that
computes with torch (softmax, matmul, exp, sums, a gather of the paged cache, ...) instead of
a Triton kernel fails here with the operator and the line that ran it. The value tests apply
the same guard to every call they make.
"""

from __future__ import annotations

import pytest
import torch

from grader.seeds import seeded_generator
from grader.suites.triton_kernels._cases import paged_inputs, results_fixture
from grader.suites.triton_kernels._ref import (
    Case,
    attention_ref,
    check_call,
    paged_ref,
    rms_norm_ref,
    softmax_ref,
)


def build_cases() -> dict[str, Case]:
    gen = seeded_generator(10)
    x = torch.randn(3, 50, generator=gen)
    w = torch.randn(50, generator=gen)
    q, k, v = (torch.randn(1, 1, 20, 16, generator=gen) for _ in range(3))
    paged = paged_inputs(gen, [5, 9], block_size=4)
    return {
        "softmax": Case("softmax on [3, 50]", "softmax", (x,), softmax_ref(x)),
        "rms_norm": Case("rms_norm on [3, 50]", "rms_norm", (x, w), rms_norm_ref(x, w, 1e-6)),
        "flash_attention": Case("flash_attention on [1, 1, 20, 16]", "flash_attention",
                                (q, k, v), attention_ref(q, k, v)),
        "paged_attention_decode": Case("paged_attention_decode, lengths [5, 9]",
                                       "paged_attention_decode", paged, paged_ref(*paged)),
    }


CASES = build_cases()
results = results_fixture(CASES)


@pytest.mark.points(2)
@pytest.mark.parametrize("function", [
    pytest.param(name, marks=pytest.mark.exercises(name), id=f"function={name}") for name in CASES])
def test_no_torch_compute_and_inputs_unchanged(results, function):
    case = CASES[function]
    check_call(case, results[case.name])
    assert not results[case.name]["inputs_changed"], (
        f"{case.name}: the wrapper modified one of its inputs; inputs are read-only (write "
        f"results only to the tensors you allocate)")

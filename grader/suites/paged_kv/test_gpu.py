"""On a GPU (2 points; skipped with "not graded on this machine" without CUDA): paged_attention
on CUDA caches, float32 and bfloat16, against dense float64 attention over the same values.

What a GPU changes: the block tables and lengths live on the GPU with the caches, so every
index and mask the code builds must be made on that device; and a gather that works by
accident on the CPU (an index tensor on the wrong device, a Python int taken from a CUDA
tensor in a loop over tokens) fails or crawls here.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from grader.compare import Tolerance, assert_close, unit_roundoff
from grader.suites.paged_kv._cases import make_case
from grader.suites.paged_kv._ref_decoder import dense_attention
from harness.cases import case_value, run_cases

pytestmark = pytest.mark.gpu

GPU_CASES = {
    "float32": make_case(31, [1, 17, 64, 129, 200, 33], block_size=16, heads=8, kv_heads=2,
                         dim=64, dtype=torch.float32, extra_pad=2),
    "bfloat16": make_case(32, [5, 16, 47, 96], block_size=16, heads=4, kv_heads=4, dim=128,
                          dtype=torch.bfloat16),
}
GPU_TIMEOUT_S = 300.0
# bfloat16: the scores, the probabilities and the output each rounded once (about 3 u of the
# largest value); 6 u of it leaves room for cuBLAS's own accumulation order. float32 keeps
# assert_close's default for its dtype.
TOLERANCES = {"bfloat16": Tolerance(
    rtol=2 * unit_roundoff(torch.bfloat16),
    atol=6 * unit_roundoff(torch.bfloat16) * float(GPU_CASES["bfloat16"]["v_cache"].abs().max()))}


def rank_on_cuda(ctx: Any, cases: dict[str, dict]) -> dict[str, Any]:
    """Every case on CUDA copies of its tensors (tables and lengths too), in its own error
    scope; each output comes back with the device it was on."""
    cache = ctx.impl_module("paged_kv", "cache")

    def run(case: dict) -> dict[str, Any]:
        c = {name: value.to("cuda") if isinstance(value, torch.Tensor) else value
             for name, value in case.items()}
        out = cache.paged_attention(c["q"], c["k_cache"], c["v_cache"], c["tables"], c["lens"],
                                    c.get("scale"))
        return {"value": out, "device": out.device.type}

    return run_cases(ctx, [(name, lambda case=case: run(case)) for name, case in cases.items()])


@pytest.fixture(scope="module")
def outputs(launch):
    return launch(rank_on_cuda, world_size=1, args=(GPU_CASES,), timeout=GPU_TIMEOUT_S
                  ).values[0]


@pytest.mark.exercises("paged_attention")
@pytest.mark.points(1)
@pytest.mark.parametrize("dtype", list(GPU_CASES), ids=[f"dtype={d}" for d in GPU_CASES])
def test_paged_attention_on_cuda(outputs, dtype):
    case = GPU_CASES[dtype]
    what = (f"paged_attention on CUDA {dtype} caches, context lengths "
            f"{case['lens'].tolist()}")
    got = case_value(outputs[dtype], what)
    if got["device"] != "cuda":
        raise AssertionError(f"{what} returned its result on {got['device']}; keep it on the "
                             f"inputs' device")
    assert_close(got["value"], dense_attention(case), dtype=case["q"].dtype, what=what,
                 tol=TOLERANCES.get(dtype), hint_first=True,
                 hint="build every index and mask on q.device: the block tables and lengths "
                      "are CUDA tensors here")

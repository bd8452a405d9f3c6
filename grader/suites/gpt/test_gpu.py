"""On a GPU (2 points; skipped with "not graded on this machine" without CUDA): attention and
RMSNorm on CUDA bfloat16 tensors against float64 references of the same bfloat16 inputs.

What a GPU changes: every tensor the code makes must be on its inputs' device (a causal mask
from `torch.arange(T)` without `device=` fails here and nowhere else), and cuBLAS's bfloat16
matrix products round where the CPU's do not. The tolerances are those a float32 softmax and a
float32 statistic keep (README §5.1, §5.4): a few bfloat16 roundings, scaled by the values.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from grader.compare import Tolerance, assert_close, unit_roundoff
from grader.suites.gpt._cases import randn
from grader.suites.gpt._ref import ref_attention, ref_rms_norm
from harness.cases import case_value, run_cases

pytestmark = pytest.mark.gpu

BF16 = torch.bfloat16
EPS = 1e-5
U = unit_roundoff(BF16)
# [batch, heads, T, d] queries over grouped K/V heads; T not a multiple of any tile size.
Q = randn(901, 2, 8, 77, 64).to(BF16)
K = randn(902, 2, 2, 77, 64).to(BF16)
V = randn(903, 2, 2, 77, 64).to(BF16)
DECODE_Q = randn(904, 2, 8, 1, 64).to(BF16)
X = (randn(905, 4, 33, 512) * 4).to(BF16)
W = (1 + 0.5 * randn(906, 512)).to(BF16)
GPU_TIMEOUT_S = 300.0


def rank_on_cuda(ctx: Any, tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Each call on CUDA copies of the inputs, in its own error scope; outputs come back as
    they are (the harness moves them to the CPU), with the device they were on."""
    model = ctx.impl_module("gpt", "model")
    cuda = {name: t.to("cuda") for name, t in tensors.items()}

    def on_device(out: torch.Tensor) -> dict[str, Any]:
        return {"value": out, "device": str(out.device.type), "dtype": str(out.dtype)}

    def norm() -> dict[str, Any]:
        module = model.RMSNorm(cuda["x"].shape[-1], EPS).to(device="cuda", dtype=BF16)
        with torch.no_grad():
            module.weight.copy_(cuda["w"])
        return on_device(module(cuda["x"]))

    return run_cases(ctx, [
        ("causal", lambda: on_device(model.attention(cuda["q"], cuda["k"], cuda["v"], True))),
        ("decode", lambda: on_device(model.attention(cuda["dq"], cuda["k"], cuda["v"], True))),
        ("full", lambda: on_device(model.attention(cuda["q"], cuda["k"], cuda["v"], False))),
        ("rms_norm", norm),
    ])


@pytest.fixture(scope="module")
def outputs(launch):
    tensors = {"q": Q, "k": K, "v": V, "dq": DECODE_Q, "x": X, "w": W}
    return launch(rank_on_cuda, world_size=1, args=(tensors,), timeout=GPU_TIMEOUT_S).values[0]


def _value(outputs: dict[str, Any], key: str, what: str) -> torch.Tensor:
    got = case_value(outputs[key], what)
    if got["device"] != "cuda" or got["dtype"] != str(BF16):
        raise AssertionError(f"{what} returned a {got['dtype']} tensor on {got['device']}; "
                             f"keep the result on the inputs' device and in their dtype")
    return got["value"]


@pytest.mark.points(1)
@pytest.mark.exercises("attention")
def test_bfloat16_attention_on_cuda(outputs):
    # Scores rounded once to bfloat16 (|s| ≲ 4 after the scale), probabilities once, the output
    # once: about 6 u of max |v| in all; 12 u leaves a correct float32 softmax under half.
    tol = Tolerance(rtol=2 * U, atol=12 * U * float(V.abs().max()))
    for key, q, causal in (("causal", Q, True), ("decode", DECODE_Q, True), ("full", Q, False)):
        what = (f"attention(causal={causal}) on CUDA bfloat16, q {list(q.shape)}, "
                f"k/v {list(K.shape)}")
        assert_close(_value(outputs, key, what), ref_attention(q, K, V, causal), what=what,
                     dtype=BF16, tol=tol, hint_first=True,
                     hint="make every tensor on q.device (the mask too) and do the softmax in "
                          "float32 (README §5.4)")


@pytest.mark.points(1)
@pytest.mark.exercises("RMSNorm")
def test_bfloat16_rms_norm_on_cuda(outputs):
    what = "RMSNorm(512) on CUDA bfloat16 [4, 33, 512]"
    # As the CPU test: computed in float32, rounded to bfloat16 at most twice (README §5.1).
    tol = Tolerance(rtol=2.2 * U, atol=0.0)
    assert_close(_value(outputs, "rms_norm", what), ref_rms_norm(X, W, EPS), what=what,
                 dtype=BF16, tol=tol, hint_first=True,
                 hint="compute the statistic in float32 on the input's device and cast the "
                      "result back to bfloat16")

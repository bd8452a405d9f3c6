"""RMSNormFunction (11 points): forward and hand-written backward against autograd of the
formula, gradcheck in float64, and exactly the documented tensors saved for backward (read in
the rank with torch.autograd.graph.saved_tensors_hooks: x, weight and one rstd per row)."""

from __future__ import annotations

import pytest
import torch

from grader.suites.gpt._cases import F32, F64, randn, register, shared_probes, special
from grader.suites.gpt._ref import ref_rms_norm, ref_rms_norm_grads
from grader.suites.gpt._ref_checks import close, result, said

EPS = 1e-5
X, W, G = randn(501, 3, 5, 7), 1 + 0.5 * randn(502, 7), randn(503, 3, 5, 7)
SX, SW, SG = randn(504, 4, 6, 10), 1 + 0.5 * randn(505, 10), randn(506, 4, 6, 10)
CX, CW = randn(507, 2, 3, 5), 1 + 0.5 * randn(508, 5)
MAX_RETURN = 10_000
SAVE_HINT = said(hint=("save exactly x, weight and rstd (one number per row) and recompute "
                       "x * rstd in backward: saving the normalised output keeps a second "
                       "x-sized tensor alive (README §8)"))


def saved_probe(x, w, g, dtype, layout="contiguous") -> dict:
    return special("saved", args=[x, w], grad_out=g, eps=EPS, dtype=dtype, layout=layout,
                   max_return=MAX_RETURN)


def build() -> dict[str, dict]:
    return {
        "f64": saved_probe(X, W, G, F64),
        "f32": saved_probe(X, W, G, F32, layout="strided"),
        "saved": saved_probe(SX, SW, SG, F32),
        "gradcheck": special("gradcheck", args=[CX, CW], eps=EPS),
    }


TAG = register("backward", build())


@pytest.fixture(scope="module")
def probes(launch, impl):
    return shared_probes(launch, impl, TAG)


@pytest.mark.points(2)
@pytest.mark.exercises("RMSNormFunction")
@pytest.mark.parametrize("dtype", [F64, F32], ids=["dtype=float64", "dtype=float32-strided"])
def test_forward_and_backward_values(probes, dtype):
    key = "f64" if dtype == F64 else "f32"
    what = f"RMSNormFunction.apply on [3, 5, 7] {str(dtype)[6:]}"
    got = result(probes, key, what)
    close(got["y"], ref_rms_norm(X, W, EPS), f"{what}: output", dtype=dtype,
          hint="the same value as RMSNorm (README §5.1)")
    gx, gw = ref_rms_norm_grads(X, W, EPS, G)
    hint = said(hint=("grad_x = rstd * (g*w - xhat * mean(g*w*xhat, -1)), grad_w = sum over "
                      "rows of g*xhat (README §8)"))
    close(got["grad_x"], gx, f"{what}: grad_x from backward", dtype=dtype, hint=hint)
    close(got["grad_w"], gw, f"{what}: grad_weight from backward", dtype=dtype, hint=hint)


@pytest.mark.points(3)
@pytest.mark.exercises("RMSNormFunction")
def test_gradcheck_float64(probes):
    ok = result(probes, "gradcheck", "torch.autograd.gradcheck(RMSNormFunction.apply, float64)")
    assert ok is True, (
        "RMSNormFunction fails torch.autograd.gradcheck in float64: its backward does not "
        "match finite differences of its forward (README §8)")


def _describe(saved: list[dict]) -> str:
    return ", ".join(f"{s['shape']} {s['dtype'][6:]}" for s in saved)


@pytest.mark.points(4)
@pytest.mark.exercises("RMSNormFunction")
def test_saves_only_x_weight_and_rstd(probes):
    got = result(probes, "saved", "RMSNormFunction.apply on [4, 6, 10] float32")
    saved = got["saved"]
    rows, dim = SX.numel() // SX.shape[-1], SX.shape[-1]
    full = [s for s in saved if s["value"] is not None and s["value"].numel() == SX.numel()]
    where = f"RMSNormFunction saved {len(saved)} tensors ({_describe(saved)})"
    assert len(full) <= 1, (
        f"{where}: {len(full)} of the size of x; it must not keep the normalised output "
        f"(x * rstd) or the result; {SAVE_HINT}")
    assert len(saved) == 3, f"{where}, expected exactly 3: x, weight, rstd; {SAVE_HINT}"
    x32 = SX.to(F32)
    assert full and torch.equal(full[0]["value"].to(F32).reshape(SX.shape), x32), (
        f"{where}: the x-sized tensor saved is not the input x; save x itself and recompute "
        f"the normalised output from it (README §8)")
    weights = [s for s in saved if s["value"] is not None and s["value"].numel() == dim
               and torch.equal(s["value"].to(F32), SW.to(F32))]
    assert weights, f"{where}: weight is not among them (README §8)"
    per_row = [s for s in saved if s["value"] is not None and s["value"].numel() == rows
               and s is not weights[0]]
    assert per_row, (
        f"{where}: none holds one number per row ({rows}); save rstd, shape x.shape[:-1] or "
        f"x.shape[:-1] + (1,) (README §8)")
    rstd = torch.rsqrt((SX.to(F32).to(F64) ** 2).mean(-1) + EPS)
    close(per_row[0]["value"].reshape(rstd.shape), rstd, "the saved per-row tensor (rstd)",
          dtype=F32, hint="rstd = 1 / sqrt(mean(x**2, -1) + eps), in float32 for this input")

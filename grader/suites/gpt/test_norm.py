"""RMSNorm (9 points): float64 and float32 values on odd and non-contiguous shapes, bfloat16
computed in float32, eps inside the square root, gradients through plain autograd."""

from __future__ import annotations

import pytest
import torch

from grader.compare import Tolerance, unit_roundoff
from grader.suites.gpt._cases import F32, F64, probe, randn, register, shared_probes
from grader.suites.gpt._ref import ref_rms_norm
from grader.suites.gpt._ref_checks import close, grad_value, result, said

EPS = 1e-5
X = randn(101, 3, 5, 7)
W = 1 + 0.5 * randn(102, 7)
SMALL = randn(103, 4, 6, scale=3e-3)  # mean square ~1e-5: eps matters as much as the data
W6 = 1 + 0.5 * randn(104, 6)
G = randn(105, 3, 5, 7)
BF = randn(106, 8, 512, scale=4.0)
W64 = 1 + 0.5 * randn(107, 512)

EPS_HINT = said(hint="eps goes inside the square root: x * rsqrt(mean(x**2) + eps) (README §5.1)")


def eps_outside(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x / (torch.sqrt((x * x).mean(-1, keepdim=True)) + eps) * w


def norm_probe(x: torch.Tensor, w: torch.Tensor, dtype: torch.dtype, **kw) -> dict:
    return probe("RMSNorm", x, kind="module", init=(x.shape[-1], EPS), dtype=dtype,
                 state={"weight": w}, **kw)


def build() -> dict[str, dict]:
    return {
        "f64": norm_probe(X, W, F64, grad=(0,), weights=G),
        "f32_strided": norm_probe(X, W, F32, layout="strided"),
        "f32_transposed": norm_probe(X, W, F32, layout="transposed"),
        "small": norm_probe(SMALL, W6, F64),
        "bf16": norm_probe(BF, W64, torch.bfloat16),
    }


TAG = register("norm", build())


@pytest.fixture(scope="module")
def probes(launch, impl):
    return shared_probes(launch, impl, TAG)


@pytest.mark.points(3)
@pytest.mark.exercises("RMSNorm")
def test_rms_norm_float64_odd_shape(probes):
    got = result(probes, "f64", "RMSNorm(7) on [3, 5, 7] float64")
    close(got["result"], ref_rms_norm(X, W, EPS), "RMSNorm(7) on [3, 5, 7] float64", dtype=F64,
          hint="x * rsqrt(mean(x**2, -1) + eps) * weight (README §5.1)",
          slips=((eps_outside(X, W, EPS), EPS_HINT),))


@pytest.mark.points(2)
@pytest.mark.exercises("RMSNorm")
def test_rms_norm_eps_inside_the_square_root(probes):
    what = "RMSNorm(6) on rows of RMS ~3e-3 (float64)"
    close(result(probes, "small", what)["result"], ref_rms_norm(SMALL, W6, EPS), what,
          dtype=F64, hint=EPS_HINT, slips=((eps_outside(SMALL, W6, EPS), EPS_HINT),))


@pytest.mark.points(1)
@pytest.mark.exercises("RMSNorm")
@pytest.mark.parametrize("layout", ["strided", "transposed"])
def test_rms_norm_float32_non_contiguous(probes, layout):
    what = f"RMSNorm(7) on a {layout} float32 [3, 5, 7]"
    close(result(probes, f"f32_{layout}", what)["result"], ref_rms_norm(X, W, EPS), what,
          dtype=F32, hint="the result must not depend on the memory layout",
          slips=((eps_outside(X, W, EPS), EPS_HINT),))


@pytest.mark.points(1)
@pytest.mark.exercises("RMSNorm")
def test_rms_norm_bfloat16_in_float32(probes):
    what = "RMSNorm(512) on bfloat16 [8, 512]"
    # Computed in float32, then rounded once to bfloat16: every element within one unit
    # roundoff u of the exact value (relative), so 2.2 u leaves the reference under half its
    # tolerance; computing in bfloat16 adds three more roundings (rsqrt, two products) and
    # lands above 2.4 u on the worst element of a batch this size (4,096 elements).
    tol = Tolerance(rtol=2.2 * unit_roundoff(torch.bfloat16), atol=0.0)
    close(result(probes, "bf16", what)["result"], ref_rms_norm(BF.to(torch.bfloat16), W64.to(
        torch.bfloat16), EPS), what, dtype=torch.bfloat16, tol=tol,
        hint="compute the statistic in float32 and cast the result back to bfloat16")


@pytest.mark.points(1)
@pytest.mark.exercises("RMSNorm")
def test_rms_norm_gradients(probes):
    got = result(probes, "f64", "RMSNorm(7) backward")
    xl = X.clone().requires_grad_(True)
    wl = W.clone().requires_grad_(True)
    gx, gw = torch.autograd.grad((ref_rms_norm(xl, wl, EPS) * G).sum(), (xl, wl))
    close(grad_value(got, 0, "RMSNorm"), gx, "gradient of RMSNorm w.r.t. x", dtype=F64,
          hint="keep the forward differentiable (no .detach(), no in-place writes)")
    close(got["param_grads"]["weight"], gw, "gradient of RMSNorm w.r.t. weight", dtype=F64)

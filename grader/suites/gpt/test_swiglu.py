"""SwiGLU (4 points): down(silu(gate(x)) * up(x)) in float64 with gradients, and float32 on a
non-contiguous input."""

from __future__ import annotations

import pytest
import torch

from grader.suites.gpt._cases import F32, F64, probe, randn, register, shared_probes
from grader.suites.gpt._ref import ref_swiglu
from grader.suites.gpt._ref_checks import close, grad_value, result, said

DIM, HIDDEN = 10, 22
X = randn(301, 3, 4, DIM)
GATE, UP, DOWN = randn(302, HIDDEN, DIM, scale=0.4), randn(303, HIDDEN, DIM, scale=0.4), \
    randn(304, DIM, HIDDEN, scale=0.3)
STATE = {"gate.weight": GATE, "up.weight": UP, "down.weight": DOWN}
G = randn(305, 3, 4, DIM)
HINT = said(hint="down(silu(gate(x)) * up(x)): silu on the gate branch only (README §5.3)")


def build() -> dict[str, dict]:
    return {
        "f64": probe("SwiGLU", X, kind="module", init=(DIM, HIDDEN), state=STATE, dtype=F64,
                     grad=(0,), weights=G),
        "f32": probe("SwiGLU", X, kind="module", init=(DIM, HIDDEN), state=STATE, dtype=F32,
                     layout="transposed"),
    }


TAG = register("swiglu", build())


@pytest.fixture(scope="module")
def probes(launch, impl):
    return shared_probes(launch, impl, TAG)


@pytest.mark.points(2)
@pytest.mark.exercises("SwiGLU")
def test_swiglu_float64_and_gradients(probes):
    got = result(probes, "f64", "SwiGLU(10, 22) on [3, 4, 10]")
    swapped = ref_swiglu(X, UP, GATE, DOWN)
    close(got["result"], ref_swiglu(X, GATE, UP, DOWN), "SwiGLU(10, 22) on [3, 4, 10]",
          dtype=F64, hint=HINT, slips=((swapped, "silu goes on gate(x), not on up(x)"),))
    xl = X.clone().requires_grad_(True)
    gx, = torch.autograd.grad((ref_swiglu(xl, GATE, UP, DOWN) * G).sum(), (xl,))
    close(grad_value(got, 0, "SwiGLU"), gx, "gradient of SwiGLU w.r.t. x", dtype=F64)


@pytest.mark.points(2)
@pytest.mark.exercises("SwiGLU")
def test_swiglu_float32_transposed(probes):
    what = "SwiGLU(10, 22) on a transposed float32 [3, 4, 10]"
    close(result(probes, "f32", what)["result"], ref_swiglu(X, GATE, UP, DOWN), what, dtype=F32,
          hint=HINT)

"""References of the mixed_precision hidden suite, computed in the parent with plain torch, and
the checks against them.

torch's own casts for the rounding and the fp8 emulation, `torch.amp.GradScaler` on CPU for the
loss scaler (through `_ranks.scaler_run`), and a plain fp32 loop for the master weights
(`ReferenceMaster`, through `_ranks.master_run`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from grader.compare import assert_close
from grader.suites.mixed_precision._ranks import scaler_run

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "e4m3": torch.float8_e4m3fn,
          "e5m2": torch.float8_e5m2}


# (mantissa bits, smallest normal exponent, largest finite value) of each format
SPECS = {"bf16": (7, -126, 3.3895313892515355e38), "fp16": (10, -14, 65504.0),
         "e4m3": (3, -6, 448.0), "e5m2": (2, -14, 57344.0)}


def said(*, hint: str) -> str:
    """`hint`, marked as text for students (grader/session/reasons.py keeps hint= strings)."""
    return hint


def torch_round(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """torch's cast; for E4M3 after a clamp to ±448, which is the documented saturation on every
    torch (2.13 saturates in the cast itself; 2.11, on a GPU image, gave NaN above 464)."""
    if fmt == "e4m3":
        x = x.clamp(-SPECS[fmt][2], SPECS[fmt][2])  # NaN stays NaN
    return x.to(DTYPES[fmt]).to(torch.float32)


def spacing(value: float, fmt: str) -> float:
    """The distance between neighbours of `fmt` around |value| (finite, within range)."""
    mant, emin, _ = SPECS[fmt]
    exponent = max(math.frexp(abs(value))[1] - 1, emin) if value else emin
    return 2.0 ** (exponent - mant)


def round_mistake(x: float, got: float, want: float, fmt: str) -> str:
    """What a wrong rounding of x says about its cause (the first words of the failure)."""
    mant, emin, top = SPECS[fmt]
    if math.isnan(want):
        return "NaN must stay NaN"
    if fmt == "e4m3" and math.isinf(got) and abs(want) == top:
        return ("E4M3 (fn) has no infinities: saturate to ±448 above the largest finite value, "
                "inf included, as torch's cast does")
    if math.isinf(want) and not math.isinf(got):
        return f"{fmt} overflows to ±inf above its largest finite value {top:g} (and keeps inf)"
    if got == 0.0 and want != 0.0 and abs(want) < 2.0 ** emin:
        return ("subnormals flushed to zero: below the smallest normal 2^"
                f"{emin} the spacing stays 2^{emin - mant} (gradual underflow)")
    if not math.isinf(want) and not math.isinf(got) and math.isfinite(x):
        step = spacing(want, fmt)
        low = math.floor(x / step) * step
        if x - low == step / 2 and abs(got) > abs(want):
            return "ties must round to even, not half up (away from zero)"
        if math.copysign(1.0, got) != math.copysign(1.0, want):
            return "the sign is lost (±0 keeps its sign too)"
    return "not the nearest value (ties to even)"


def check_rounding(x: torch.Tensor, got: Any, fmt: str, what: str) -> None:
    """Bit-for-bit against torch's cast (NaN only as NaN); the first line names the cause."""
    want = torch_round(x, fmt)
    if not isinstance(got, torch.Tensor) or got.dtype != torch.float32 or got.shape != x.shape:
        raise AssertionError(f"{what}: expected a float32 tensor of shape {tuple(x.shape)}, got "
                             f"{getattr(got, 'dtype', type(got).__name__)} "
                             f"{tuple(getattr(got, 'shape', ()))}")
    same = (got.view(torch.int32) == want.view(torch.int32)) | (got.isnan() & want.isnan())
    if bool(same.all()):
        return
    bad = (~same).nonzero().flatten()
    i = int(bad[0])
    cause = round_mistake(float(x[i]), float(got[i]), float(want[i]), fmt)
    raise AssertionError(f"{what}: {cause} (README §3) — {len(bad)} of {x.numel()} values "
                         f"differ, e.g. {float(x[i])!r} -> {float(got[i])!r}, torch's cast "
                         f"gives {float(want[i])!r}")


def scaler_reference(spec: dict) -> dict[str, Any]:
    """The same run with torch.amp.GradScaler on CPU (its step() returns None or the optimizer's
    return: only the parameters say whether it stepped)."""
    return scaler_run(torch.amp.GradScaler("cpu", **spec["scaler"]), spec)


class ReferenceMaster:
    """The parent's own master-weight loop (README §6), for `master_run`."""

    def __init__(self, params: list[nn.Parameter], make_optimizer: Callable[..., Any]) -> None:
        self.model_params = params
        self.master_params = [p.detach().float().requires_grad_(True) for p in params]
        self.optimizer = make_optimizer(self.master_params)

    def zero_grad(self) -> None:
        for p in self.model_params + self.master_params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for p, m in zip(self.model_params, self.master_params):
            m.grad = None if p.grad is None else p.grad.float()
        self.optimizer.step()
        for p, m in zip(self.model_params, self.master_params):
            p.copy_(m.to(torch.bfloat16))


def fp8_reference(spec: dict) -> list[dict[str, Any]]:
    """The documented emulation (README §8) with torch's own fp8 casts, in float32."""
    state = {f"{t}_amax_history": torch.zeros(spec["h"]) for t in ("x", "w", "grad")}
    state.update({f"{t}_scale": torch.ones(()) for t in ("x", "w", "grad")})

    def dq(t: torch.Tensor, kind: str, fmt: str, top: float) -> torch.Tensor:
        s = state[f"{kind}_scale"]
        return (t * s).clamp(-top, top).to(DTYPES[fmt]).to(torch.float32) / s

    def record(kind: str, t: torch.Tensor, top: float) -> None:
        hist = state[f"{kind}_amax_history"]
        hist = torch.cat([t.abs().max().reshape(1), hist[:-1]])
        state[f"{kind}_amax_history"] = hist
        m = hist.max()
        if bool(torch.isfinite(m)) and float(m) > 0:
            state[f"{kind}_scale"] = torch.tensor(448.0 if kind != "grad" else 57344.0) / m

    calls = []
    w = spec["weight"]
    for x, g in zip(spec["xs"], spec["gs"]):
        x_dq, w_dq = dq(x, "x", "e4m3", 448.0), dq(w, "w", "e4m3", 448.0)
        record("x", x, 448.0)
        record("w", w, 448.0)
        y = x_dq @ w_dq.t() + (spec["bias"] if spec["bias"] is not None else 0.0)
        call: dict[str, Any] = {"y": y, "fwd": {k: v.clone() for k, v in state.items()}}
        if g is not None:
            g_dq = dq(g, "grad", "e5m2", 57344.0)
            record("grad", g, 57344.0)
            call.update({"dx": g_dq @ w_dq, "dw": g_dq.t() @ x_dq, "db": g.sum(0),
                         "bwd": {k: v.clone() for k, v in state.items()}})
        calls.append(call)
    return calls


def close(actual: Any, expected: torch.Tensor, what: str, hint: str = "",
          scale: float = 1.0) -> None:
    if not isinstance(actual, torch.Tensor):
        raise AssertionError(f"{what}: expected a tensor, got {type(actual).__name__}; {hint}")
    assert_close(actual.to(torch.float64), expected.to(torch.float64), what=what, hint=hint,
                 dtype=torch.float32, scale=scale, check_dtype=False, hint_first=True)

"""Tolerances per dtype, in one place, and the comparison every suite uses.

The tolerances are loose enough for a different but correct order of floating-point
operations (another reduction order across ranks, x86 vs Apple silicon) and tight enough that a
wrong formula fails. `scale` widens them for long accumulations (e.g. several optimizer steps).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class Tolerance:
    rtol: float
    atol: float


TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float64: Tolerance(rtol=1e-9, atol=1e-11),
    torch.float32: Tolerance(rtol=2e-5, atol=2e-6),
    torch.bfloat16: Tolerance(rtol=2e-2, atol=1e-2),
    torch.float16: Tolerance(rtol=2e-3, atol=1e-3),
}
EXACT = Tolerance(rtol=0.0, atol=0.0)


def tolerance(dtype: torch.dtype, scale: float = 1.0) -> Tolerance:
    """The tolerance for `dtype` (exact for integer and bool dtypes), widened by `scale`."""
    base = TOLERANCES.get(dtype, EXACT)
    return Tolerance(rtol=base.rtol * scale, atol=base.atol * scale)


def assert_close(actual: object, expected: torch.Tensor, *, what: str, dtype: torch.dtype | None
                 = None, scale: float = 1.0, hint: str = "", check_dtype: bool = True) -> None:
    """Raise AssertionError unless `actual` matches `expected` within the dtype's tolerance.

    `what` names the value ("[rank 2 of 4] fc2.weight after step 3"); `hint` is the likely fix.
    The first line of the message says what, how much (max |Δ|) and where.
    """
    suffix = f"; {hint}" if hint else ""
    if not isinstance(actual, torch.Tensor):
        raise AssertionError(f"{what}: expected a tensor, got {type(actual).__name__}{suffix}")
    if tuple(actual.shape) != tuple(expected.shape):
        raise AssertionError(f"{what}: shape {tuple(actual.shape)}, expected "
                             f"{tuple(expected.shape)}{suffix}")
    if check_dtype and actual.dtype != expected.dtype:
        raise AssertionError(f"{what}: dtype {actual.dtype}, expected {expected.dtype}{suffix}")
    tol = tolerance(dtype or expected.dtype, scale)
    a = actual.detach().cpu().to(torch.float64)
    e = expected.detach().cpu().to(torch.float64)
    if a.numel() == 0:
        return
    nan_mismatch = torch.isnan(a) != torch.isnan(e)
    diff = (a - e).abs().nan_to_num(nan=0.0, posinf=float("inf"))
    bad = (diff > tol.atol + tol.rtol * e.abs().nan_to_num(nan=0.0)) | nan_mismatch
    bad |= torch.isinf(a) & torch.isinf(e) & (torch.sign(a) != torch.sign(e))
    if bool(bad.any()):
        count = int(bad.sum())
        flat = int(torch.argmax(bad.flatten().to(torch.int8)))
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape)) \
            if a.dim() else ()
        raise AssertionError(
            f"{what}: differs from the reference by {float(diff.max()):.3g} (max |Δ|) in "
            f"{count} of {a.numel()} elements, first at {list(index)}: got "
            f"{float(a.flatten()[flat]):.6g}, expected {float(e.flatten()[flat]):.6g}{suffix}\n"
            f"(tolerance for {dtype or expected.dtype}: rtol={tol.rtol:g}, atol={tol.atol:g})")

"""How the ppo hidden suite judges a probe's answer, in the parent.

`result` turns a failed probe back into the harness's own errors (`case_value`: "not
implemented yet: <function>" for a stub). Expected values are computed by the tests with plain
torch and float64; `close` compares at the float32 tolerance, so that an implementation with
float32 intermediates still passes, and leads with a known mistake's message when the answer
matches it (`slips`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from grader.compare import assert_close
from grader.suites.ppo._cases import F64
from harness.cases import case_value


def result(results: dict[str, dict], key: str, what: str) -> dict[str, Any]:
    """The probe's {"result", "grads"}; re-raises a failed probe as the harness would."""
    return case_value(results[key], what)


def error_of(results: dict[str, dict], key: str) -> dict[str, Any] | None:
    """The probe's exception as data ({"type", "message", ...}), None if it returned; a stub
    re-raises as "not implemented"."""
    outcome = results[key]
    if outcome.get("ok"):
        return None
    error = outcome.get("error") or {}
    if error.get("not_implemented"):
        case_value(outcome, key)
    return error


def tensor_of(value: Any, what: str) -> torch.Tensor:
    """`value` as a tensor, or an AssertionError naming what came back instead."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.tensor(float(value), dtype=F64)
    raise AssertionError(f"{what}: expected a tensor, got {value!r:.80}")


def said(*, hint: str) -> str:
    """`hint`, marked as text for students: the hint= keyword keeps a hidden suite's string
    in the reason a student reads (grader/session/reasons.py scrubs other string constants)."""
    return hint


def close(actual: Any, expected: torch.Tensor, what: str, hint: str = "",
          scale: float = 1.0,
          slips: Sequence[tuple[torch.Tensor, str]] = ()) -> None:
    """Compare at float32 tolerance, whatever dtype came back (shape must match).

    `slips` are (what a known mistake returns, what to tell its author): when `actual` is wrong
    but matches one of them, that message replaces `hint`, so the first line names the cause."""
    actual = tensor_of(actual, what)
    try:
        assert_close(actual.to(F64), expected.to(F64), what=what, hint=hint,
                     dtype=torch.float32, scale=scale, check_dtype=False)
        return
    except AssertionError:
        cause = matching_slip(actual, slips)
        if cause is None:
            raise
    assert_close(actual.to(F64), expected.to(F64), what=what, hint=cause,
                 dtype=torch.float32, scale=scale, check_dtype=False)


def matching_slip(actual: torch.Tensor, slips: Sequence[tuple[torch.Tensor, str]]
                  ) -> str | None:
    """The message of the first slip whose value `actual` matches (float32-loose), else None."""
    for value, message in slips:
        if tuple(value.shape) == tuple(actual.shape) and bool(torch.allclose(
                actual.to(F64), value.to(F64), rtol=1e-4, atol=1e-4, equal_nan=True)):
            return message
    return None


def finite(actual: Any, what: str, hint: str = "") -> torch.Tensor:
    actual = tensor_of(actual, what)
    bad = ~torch.isfinite(actual)
    if bool(bad.any()):
        raise AssertionError(f"{what}: {int(bad.sum())} of {actual.numel()} values are nan or "
                             f"inf{'; ' + hint if hint else ''}")
    return actual


def valid(value: Any, mask: torch.Tensor, what: str) -> torch.Tensor:
    """The entries of `value` where `mask` is true (a flat tensor), checking the shape first."""
    value = tensor_of(value, what)
    if tuple(value.shape) != tuple(mask.shape):
        raise AssertionError(f"{what}: shape {tuple(value.shape)}, expected {tuple(mask.shape)}")
    return value[mask]


def grad_of(got: dict[str, Any], index: int, what: str, like: torch.Tensor) -> torch.Tensor:
    """The gradient of the probe w.r.t. argument `index` (zeros like `like` when it got none)."""
    grad = got["grads"].get(index)
    if isinstance(grad, str):
        raise AssertionError(f"{what}: the result carries no gradient ({grad}); compute it from "
                             f"the input tensors with differentiable torch operations")
    return torch.zeros_like(like) if grad is None else grad

"""Shared pieces of the ppo hidden suite.

Every unit test module builds a dict of *probes* in the parent — calls of one function of the
module under test with inputs made here — and runs all of them in one rank (`run_probes`, a
module-scoped fixture's single launch). The rank catches each probe's exception separately, so a
student who has written compute_gae but not ppo_clip_loss still earns the GAE points: each probe
is one case of `harness.cases.run_cases`, and `result` turns a failed probe back into the
harness's own errors (`case_value`: "not implemented yet: <function>" for a stub).

A probe is a plain dict:
    fn       name of the function in ppo.py
    args     positional arguments (tensors, numbers, strings, None)
    kwargs   keyword arguments
    grad     indices of `args` to differentiate with respect to (they get requires_grad)
    weights  optional tensor w: backward through (w * out).sum() instead of out.sum(), where out
             is the result (or its first element when the result is a tuple)

Expected values are computed here with plain torch and float64; the comparisons use the float32
tolerance so that an implementation with float32 intermediates still passes.

The CartPole learning test lives in test_z_learning.py: the name sorts last, so a mutant run
(which stops at the first failure) meets every cheap unit test before the expensive one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from grader.compare import assert_close
from harness.cases import case_value, run_cases

PROBE_TIMEOUT = 120.0
F64 = torch.float64


def probe(fn: str, *args: Any, grad: tuple[int, ...] = (), weights: torch.Tensor | None = None,
          **kwargs: Any) -> dict[str, Any]:
    return {"fn": fn, "args": list(args), "kwargs": kwargs, "grad": list(grad),
            "weights": weights}


# -- rank side ----------------------------------------------------------------------------------
def rank_probes(ctx: Any, probes: dict[str, dict]) -> dict[str, dict]:
    """Runs in the rank: every probe of `probes`, each in its own error scope (harness.cases)."""
    ppo = ctx.impl_module("ppo", "ppo")
    return run_cases(ctx, [(key, lambda spec=spec: _call(ppo, spec))
                           for key, spec in probes.items()])


def _call(ppo: Any, spec: dict) -> dict[str, Any]:
    args = [a.detach().clone().requires_grad_(True) if i in spec["grad"] else a
            for i, a in enumerate(spec["args"])]
    result = getattr(ppo, spec["fn"])(*args, **spec["kwargs"])
    grads: dict[int, Any] = {}
    if spec["grad"]:
        out = result[0] if isinstance(result, tuple) else result
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            grads = {i: "no graph" for i in spec["grad"]}
        else:
            weights = spec["weights"]
            total = (out * weights).sum() if weights is not None else out.sum()
            total.backward()
            grads = {i: args[i].grad for i in spec["grad"]}
    return {"result": result, "grads": grads}


# -- parent side ---------------------------------------------------------------------------------
def run_probes(launch: Any, probes: dict[str, dict]) -> dict[str, dict]:
    return launch(rank_probes, world_size=1, args=(probes,), timeout=PROBE_TIMEOUT).values[0]


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

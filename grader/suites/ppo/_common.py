"""Shared pieces of the ppo hidden suite.

Every unit test module builds a dict of *probes* in the parent — calls of one function of the
module under test with inputs made here — and runs all of them in one rank (`run_probes`, a
module-scoped fixture's single launch). The rank catches each probe's exception separately, so a
student who has written compute_gae but not ppo_clip_loss still earns the GAE points; `result`
turns a failed probe back into the harness's own errors ("not implemented" for a stub).

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

import traceback
from typing import Any

import torch

from grader.compare import assert_close
from harness.errors import NotImplementedInRank, RankFailure

PROBE_TIMEOUT = 120.0
F64 = torch.float64


def probe(fn: str, *args: Any, grad: tuple[int, ...] = (), weights: torch.Tensor | None = None,
          **kwargs: Any) -> dict[str, Any]:
    return {"fn": fn, "args": list(args), "kwargs": kwargs, "grad": list(grad),
            "weights": weights}


# -- rank side ----------------------------------------------------------------------------------
def rank_probes(ctx: Any, probes: dict[str, dict]) -> dict[str, dict]:
    """Runs in the rank: every probe of `probes`, each with its own try/except."""
    ppo = ctx.impl_module("ppo", "ppo")
    out: dict[str, dict] = {}
    for key, spec in probes.items():
        try:
            out[key] = {"ok": True, **_call(ppo, spec)}
        except Exception as exc:  # noqa: BLE001 - every failure is reported per probe
            out[key] = {"ok": False, "exc_type": type(exc).__name__,
                        "message": str(exc)[:500],
                        "not_implemented": isinstance(exc, NotImplementedError),
                        "traceback": traceback.format_exc()[-2000:]}
    return out


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
    return {"result": _plain(result), "grads": grads}


def _plain(value: Any) -> Any:
    """Only plain data leaves the rank; anything else becomes a descriptive string."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return f"<{type(value).__name__}>"


# -- parent side ---------------------------------------------------------------------------------
def run_probes(launch: Any, probes: dict[str, dict]) -> dict[str, dict]:
    return launch(rank_probes, world_size=1, args=(probes,), timeout=PROBE_TIMEOUT).values[0]


def result(results: dict[str, dict], key: str, what: str) -> dict[str, Any]:
    """The probe's {"result", "grads"}; re-raises a failed probe as the harness would."""
    got = results[key]
    if got["ok"]:
        return got
    first = got["message"].splitlines()[0] if got["message"] else got["exc_type"]
    fields = dict(rank=0, exc_type=got["exc_type"], message=got["message"],
                  traceback=got["traceback"], output_tail="")
    if got["not_implemented"]:
        raise NotImplementedInRank(f"not implemented yet: {first}", **fields)
    raise RankFailure(f"{what} raised {got['exc_type']}: {first}\n{got['traceback']}", **fields)


def tensor_of(value: Any, what: str) -> torch.Tensor:
    """`value` as a tensor, or an AssertionError naming what came back instead."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.tensor(float(value), dtype=F64)
    raise AssertionError(f"{what}: expected a tensor, got {value!r:.80}")


def close(actual: Any, expected: torch.Tensor, what: str, hint: str = "",
          scale: float = 1.0) -> None:
    """Compare at float32 tolerance, whatever dtype came back (shape must match)."""
    actual = tensor_of(actual, what)
    assert_close(actual.to(F64), expected.to(F64), what=what, hint=hint, dtype=torch.float32,
                 scale=scale, check_dtype=False)


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

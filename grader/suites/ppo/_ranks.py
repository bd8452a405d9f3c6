"""What travels to the ranks of the ppo hidden suite: the probes' calls.

`rank_probes` runs every probe of a launch, each in its own error scope (one case of
`harness.cases.run_cases`), so a student who has written compute_gae but not ppo_clip_loss
still earns the GAE points. A probe is a plain dict (built in the parent, `_cases.probe`):
    fn       name of the function in ppo.py
    args     positional arguments (tensors, numbers, strings, None)
    kwargs   keyword arguments
    grad     indices of `args` to differentiate with respect to (they get requires_grad)
    weights  optional tensor w: backward through (w * out).sum() instead of out.sum(), where out
             is the result (or its first element when the result is a tuple)
"""

from __future__ import annotations

from typing import Any

import torch

from harness.cases import run_cases


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


"""References of the framework suite, computed in the parent; never imports code under test.

- FLOPs: `torch.utils.flop_counter.FlopCounterMode`, torch's own counter, run here on the same
  programs and tensors, forward and backward apart, keyed by overload-packet name.
- Saved bytes: README §3.1's definition with hooks run here (`_ranks.packed_bytes`).
- Values and gradients: plain autograd in float64 on the same tensors.
- `graph_break_mlp`: `GraphBreakMLP`'s function restated here in float64 (README §4 of the
  provided module's docstring), not imported from the assignment.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from grader.suites.framework._ranks import leaves, packed_bytes
from grader.suites.framework._ranks_programs import CHECKPOINTED, FLOP_PROGRAMS, SAVED_FUNCTIONS

F64 = torch.float64


def _global_counts(mode: FlopCounterMode) -> dict[str, int]:
    counts = mode.get_flop_counts().get("Global", {})
    return {str(op): int(n) for op, n in counts.items() if int(n) > 0}


def flops_ref(case: dict) -> dict[str, Any]:
    """{"forward": {op: FLOPs}, "backward": {...}, "out": float64 output, "grads": [...]}."""
    xs = leaves(case["tensors"], case["grads"])
    program = FLOP_PROGRAMS[case["program"]]
    with FlopCounterMode(display=False) as forward:
        out = program(*xs)
    with FlopCounterMode(display=False) as backward:
        out.backward(case["grad_out"])
    xs64 = leaves([t.to(F64) for t in case["tensors"]], case["grads"])
    out64 = program(*xs64)
    out64.backward(case["grad_out"].to(F64))
    return {"forward": _global_counts(forward), "backward": _global_counts(backward),
            "out": out64.detach(), "grads": [x.grad for x in xs64]}


def saved_bytes_ref(case: dict) -> int:
    xs = leaves(case["tensors"], case["grads"])
    fn = SAVED_FUNCTIONS[case["fn"]]
    return packed_bytes(lambda: fn(*xs))[1]


def storage_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of the distinct storages of `tensors` (each drawn fresh: one storage each)."""
    return sum(t.untyped_storage().nbytes() for t in tensors)


def checkpoint_ref(case: dict) -> dict[str, Any]:
    xs = leaves([t.to(F64) for t in case["tensors"]], case["grads"])
    out = CHECKPOINTED[case["fn"]](*xs)
    out.backward(case["grad_out"].to(F64))
    return {"out": out.detach(), "grads": [x.grad for x in xs]}


def swiglu_ref(case: dict) -> dict[str, Any]:
    gate, up = leaves([t.to(F64) for t in case["tensors"]], case["grads"])
    out = F.silu(gate) * up
    out.backward(case["grad_out"].to(F64))
    return {"out": out.detach(), "grads": [gate.grad, up.grad]}


def graph_break_mlp(state: dict[str, torch.Tensor], x: torch.Tensor, hidden: int
                    ) -> torch.Tensor:
    """GraphBreakMLP's function in float64: up, divide by max |h| when it exceeds 1, exact
    gelu, causal running mean over positions, times 1/sqrt(hidden), down, plus x."""
    s = {k: v.to(F64) for k, v in state.items()}
    x = x.to(F64)
    h = F.linear(x, s["up.weight"], s["up.bias"])
    largest = h.abs().max()
    if largest > 1.0:
        h = h / largest
    h = F.gelu(h)
    positions = torch.arange(1, x.shape[1] + 1, dtype=F64)
    mean = h.cumsum(dim=1) / positions[:, None]
    return x + F.linear(mean / math.sqrt(hidden), s["down.weight"], s["down.bias"])


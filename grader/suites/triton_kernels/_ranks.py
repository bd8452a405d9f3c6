"""Rank side of the triton_kernels hidden suite (these functions run inside rank processes).

`rank_cases` imports the code under test with `ctx.impl_module`, applies each case's layout,
calls the wrapper under `ComputeGuard` (recording, not raising, so the parent can report the
first forbidden operator even if the wrapper swallows exceptions) and returns plain data per
case, each in its own error scope (`harness.cases`), so one broken configuration does not hide
the results of the others.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.cases import capture
from harness.compute_guard import ComputeGuard


def relayout(tensor: Any, layout: str) -> Any:
    """The same values with another memory layout (non-tensors pass through)."""
    if not isinstance(tensor, torch.Tensor) or layout == "contiguous":
        return tensor
    if layout == "transposed" and tensor.dim() == 2:  # column-major: strides (1, rows)
        return tensor.t().contiguous().t()
    if layout == "bshd" and tensor.dim() == 4:  # [batch, seq, heads, dim] storage
        return tensor.transpose(1, 2).contiguous().transpose(1, 2)
    if layout == "padded" and tensor.is_floating_point():  # a view into a NaN-filled buffer
        corner = tuple(slice(0, n) for n in tensor.shape)  # one larger in every dim
        wider = torch.full([n + 1 for n in tensor.shape], float("nan"), dtype=tensor.dtype)
        wider[corner] = tensor
        return wider[corner]
    return tensor


def call_case(kernels: Any, case: dict[str, Any]) -> dict[str, Any]:
    """Run one case in its own error scope (`harness.cases.capture`): its outcome, plus
    `inputs_changed`, the guard's `violations`, `guard_message` and `launches` (Triton
    kernel launches counted at Triton's own launch entry points)."""
    args = tuple(relayout(a, case["layout"]) for a in case["args"])
    before = [a.clone() for a in args if isinstance(a, torch.Tensor)]
    guard = ComputeGuard(case["function"], strict=False)

    def call() -> Any:
        with guard:
            return getattr(kernels, case["function"])(*args, **case["kwargs"])

    result = capture(call)
    after = [a for a in args if isinstance(a, torch.Tensor)]
    result["inputs_changed"] = not all(torch.equal(x, y) for x, y in zip(before, after))
    result["violations"] = [v.describe() for v in guard.violations]
    result["guard_message"] = guard.message()
    result["launches"] = guard.launches
    return result


def rank_cases(ctx, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rank function: every case in order, on CPU tensors (TRITON_INTERPRET=1 via launch)."""
    kernels = ctx.impl_module("triton_kernels", "kernels")
    return [call_case(kernels, case) for case in cases]


def rank_cases_on_gpu(ctx, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rank function: the same cases compiled, with every tensor moved to the GPU first."""
    kernels = ctx.impl_module("triton_kernels", "kernels")
    device = torch.device("cuda", torch.cuda.current_device())
    moved = [{**case, "args": tuple(a.to(device) if isinstance(a, torch.Tensor) else a
                                    for a in case["args"])} for case in cases]
    return [call_case(kernels, case) for case in moved]

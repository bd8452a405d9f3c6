"""Instruments the fsdp tests put into their models (provided: read it, do not edit it).

The public test and the hidden suite build their ZeRO-3 models from these, in the ranks:

- `ProbedBlock(width)`: one unit, x + scale * tanh(fc(x)), whose `fc` is a `ProbeLinear`: its
  forward first calls `ProbeLinear.probe` when a test has set it (to measure the memory alive
  while the unit runs), and its backward checks that the unit was gathered again;
- `CheckedLinear` and `CheckedScale`: `F.linear` and `h * scale` whose backward first checks
  that the parameter saved in forward still has its memory. A unit freed after its forward and
  not gathered again before its backward would otherwise be read from an empty storage; here
  it raises a RuntimeError that names the fix.
- `live_storages(threshold)`: the distinct storages of at least `threshold` bytes of every
  tensor Python can reach, which is how the tests measure what a unit keeps alive.

Nothing here knows an expected value; the tests judge what the ranks return in the parent.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn

__all__ = ["CheckedLinear", "CheckedScale", "ProbeLinear", "ProbedBlock", "live_storages"]

# What a backward raises when the parameter it saved has lost its memory (checked inline, so
# that the error names the backward it came from).
FREED_IN_BACKWARD = ("a unit's parameters are freed in backward (empty storage): re-gather the "
                     "unit before its backward")


class CheckedLinear(torch.autograd.Function):
    """F.linear(x, weight, bias) whose backward first checks that `weight` kept its memory."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor,
                bias: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return torch.nn.functional.linear(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x, weight = ctx.saved_tensors
        needed = (weight.storage_offset() + weight.numel()) * weight.element_size()
        if weight.untyped_storage().nbytes() < needed:
            raise RuntimeError(FREED_IN_BACKWARD)
        rows, grad_rows = x.reshape(-1, x.shape[-1]), grad.reshape(-1, grad.shape[-1])
        return grad @ weight, grad_rows.t() @ rows, grad_rows.sum(0)


class CheckedScale(torch.autograd.Function):
    """h * scale for a one-element `scale` parameter, with the same check in backward."""

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(h, scale)
        return h * scale

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h, scale = ctx.saved_tensors
        needed = (scale.storage_offset() + scale.numel()) * scale.element_size()
        if scale.untyped_storage().nbytes() < needed:
            raise RuntimeError(FREED_IN_BACKWARD)
        return grad * scale, (grad * h).sum().reshape(scale.shape)


class ProbeLinear(nn.Linear):
    """nn.Linear whose forward first calls `ProbeLinear.probe` (None unless a test sets it, in a
    rank), and whose backward checks that its weight is there (CheckedLinear)."""

    probe: ClassVar[Callable[[], None] | None] = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if ProbeLinear.probe is not None:
            ProbeLinear.probe()
        return CheckedLinear.apply(x, self.weight, self.bias)


class ProbedBlock(nn.Module):
    """x + scale * tanh(fc(x)): `fc` a ProbeLinear [width, width], `scale` one element. Its
    parameters, in `named_parameters()` order: scale, fc.weight, fc.bias."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = ProbeLinear(width, width)
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + CheckedScale.apply(torch.tanh(self.fc(x)), self.scale)


def live_storages(threshold: int) -> dict[int, int]:
    """{data_ptr: bytes} of the distinct live storages of at least `threshold` bytes, of every
    tensor the garbage collector tracks (i.e. reachable from Python)."""
    seen: dict[int, int] = {}
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor):
            try:
                storage = obj.untyped_storage()
            except (RuntimeError, NotImplementedError):
                continue
            if storage.nbytes() >= threshold:
                seen[storage.data_ptr()] = storage.nbytes()
    return seen

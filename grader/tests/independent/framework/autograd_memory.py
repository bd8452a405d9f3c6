"""Saved tensors, recomputation and a fused SwiGLU (independent, from README §3)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.autograd.graph import saved_tensors_hooks


def saved_tensor_bytes(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> int:
    """Sum of distinct storage sizes autograd packs while `fn(*inputs)` runs once."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.nbytes():
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    return sum(seen.values())


class _Recompute(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> torch.Tensor:
        ctx.fn = fn
        ctx.save_for_backward(*inputs)
        with torch.no_grad():
            return fn(*inputs)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        fresh = [t.detach().requires_grad_(t.requires_grad) for t in ctx.saved_tensors]
        with torch.enable_grad():
            out = ctx.fn(*fresh)
        wanted = [t for t in fresh if t.requires_grad]
        grads = torch.autograd.grad(out, wanted, grad, allow_unused=True) if wanted else ()
        found = iter(grads)
        return (None, *(next(found) if t.requires_grad else None for t in fresh))


def checkpoint(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> torch.Tensor:
    """`fn(*inputs)`, saving only the inputs and recomputing `fn` in backward."""
    return _Recompute.apply(fn, *inputs)


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        return gate * torch.sigmoid(gate) * up

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, Any]:
        gate, up = ctx.saved_tensors
        sig = torch.sigmoid(gate)
        d_gate = d_up = None
        if ctx.needs_input_grad[0]:
            d_gate = grad * up * sig * (1 + gate * (1 - sig))
        if ctx.needs_input_grad[1]:
            d_up = grad * gate * sig
        return d_gate, d_up


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """`silu(gate) * up` with a hand-written backward that saves two tensors."""
    return _SwiGLU.apply(gate, up)

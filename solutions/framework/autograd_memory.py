"""Autograd's memory: the reference `autograd_memory.py`, a worked example (README §3).

Three views of one fact: what autograd keeps alive between forward and backward is decided op
by op, and a `torch.autograd.Function` decides it for itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.autograd.graph import saved_tensors_hooks


def saved_tensor_bytes(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> int:
    """Bytes of the distinct storages autograd saves while `fn(*inputs)` runs (README §3.1)."""
    sizes: dict[Any, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        # A view, or a tensor saved by two ops, shares one storage: key by the storage's
        # address and count its bytes once. Zero-byte storages are free.
        storage = t.untyped_storage()
        if storage.nbytes() > 0:
            sizes[(storage.data_ptr(), t.device)] = storage.nbytes()
        return t

    def unpack(t: torch.Tensor) -> torch.Tensor:
        return t

    with saved_tensors_hooks(pack, unpack):
        fn(*inputs)
    return sum(sizes.values())


class _Recompute(torch.autograd.Function):
    """Saves only the inputs; backward replays `fn` to rebuild the graph it needs
    (Chen et al. 2016; `torch.utils.checkpoint` does the same with more options)."""

    @staticmethod
    def forward(ctx: Any, fn: Callable[..., torch.Tensor], *inputs: torch.Tensor
                ) -> torch.Tensor:
        ctx.fn = fn
        ctx.save_for_backward(*inputs)
        # Inside Function.forward grad mode is already off: fn records and saves nothing.
        with torch.no_grad():
            return fn(*inputs)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        saved = ctx.saved_tensors
        needs = ctx.needs_input_grad[1:]
        # Fresh leaves, so the replay builds a graph of its own that ends at them.
        leaves = [t.detach().requires_grad_(need) for t, need in zip(saved, needs, strict=True)]
        with torch.enable_grad():
            out = ctx.fn(*leaves)
        wanted = [t for t in leaves if t.requires_grad]
        grads = iter(torch.autograd.grad(out, wanted, grad_out, allow_unused=True)
                     if wanted else ())
        return (None, *[next(grads) if need else None for need in needs])


def checkpoint(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> torch.Tensor:
    """`fn(*inputs)`, saving only `inputs` and recomputing in backward (README §3.2)."""
    return _Recompute.apply(fn, *inputs)


class _SwiGLU(torch.autograd.Function):
    """`silu(gate) * up` with the derivative written out (Shazeer 2020's gated unit)."""

    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        # Save the two inputs only; sigmoid(gate) is cheap to recompute in backward.
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        gate, up = ctx.saved_tensors
        s = torch.sigmoid(gate)
        silu = gate * s
        # d silu/d g = s + g·s·(1 − s) = s·(1 + g·(1 − s))
        grad_gate = grad * up * s * (1 + gate * (1 - s)) if ctx.needs_input_grad[0] else None
        grad_up = grad * silu if ctx.needs_input_grad[1] else None
        return grad_gate, grad_up


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """`silu(gate) * up` with a hand-written backward (README §3.3)."""
    return _SwiGLU.apply(gate, up)

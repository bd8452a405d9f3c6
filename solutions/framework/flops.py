"""Counting FLOPs under the dispatcher: the reference `flops.py`, a worked example (README §2).

The same idea as `torch.utils.flop_counter.FlopCounterMode` (which the grader uses as the
reference, and which this file may not import): a dispatch mode sits below autograd, so it
sees every aten operator of the forward and, when backward runs inside it, of the backward,
with real shapes. FLOPs follow from shapes alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# The aten operators counted, by their overload-packet name (`str(func.overloadpacket)`).
COUNTED_OPS = ("aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten.convolution",
               "aten.convolution_backward")


def _matmul_flops(a: Sequence[int], b: Sequence[int]) -> int:
    """A (batched) matrix product `[.., m, k] @ [.., k, n]`: one multiply and one add per
    term of every output element, so 2·(batch)·m·n·k."""
    *batch, m, k = a
    n = b[-1]
    return 2 * prod(batch) * m * n * k


def _conv_flops(x_shape: Sequence[int], w_shape: Sequence[int],
                out_shape: Sequence[int]) -> int:
    """A (non-transposed) convolution: every output point is a dot product of length
    `C_in/groups · prod(kernel)`, for every output channel and batch element."""
    batch, c_out, c_in_per_group = x_shape[0], w_shape[0], w_shape[1]
    return 2 * batch * prod(out_shape[2:]) * c_out * c_in_per_group * prod(w_shape[2:])


def _flops_of(name: str, args: tuple[Any, ...], out: Any) -> int:
    """FLOPs of one call of the counted operator `name` (README §2's table)."""
    if name == "aten.mm":
        return _matmul_flops(args[0].shape, args[1].shape)
    if name in ("aten.addmm", "aten.baddbmm"):
        # the bias (args[0]) is an add per output element: not counted, by convention
        return _matmul_flops(args[1].shape, args[2].shape)
    if name == "aten.bmm":
        return _matmul_flops(args[0].shape, args[1].shape)
    if name == "aten.convolution":
        return _conv_flops(args[0].shape, args[1].shape, out.shape)
    # convolution_backward(grad_out, input, weight, ..., output_mask): grad_input is a
    # transposed convolution of grad_out with the weight, grad_weight a convolution of the
    # input with grad_out; each costs what the forward did, and runs only when asked for.
    grad_out, x, w, output_mask = args[0], args[1], args[2], args[10]
    forward = _conv_flops(x.shape, w.shape, grad_out.shape)
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


class FlopCounter(TorchDispatchMode):
    """Counts FLOPs per aten operator while active (the stub's docstring is the contract)."""

    def __init__(self) -> None:
        super().__init__()
        self._flops: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        # Run the operator exactly once; count from the shapes of its arguments and result.
        out = func(*args, **(kwargs or {}))
        name = str(func.overloadpacket)
        if name in COUNTED_OPS:
            self._flops[name] = self._flops.get(name, 0) + _flops_of(name, args, out)
        return out

    @property
    def flops(self) -> dict[str, int]:
        """FLOPs so far per counted aten operator (a new dict)."""
        return dict(self._flops)


def forward_backward_flops(fn: Callable[[], torch.Tensor]) -> dict[str, dict[str, int]]:
    """FLOPs of `fn()` and of its backward, counted apart (the stub's docstring)."""
    with FlopCounter() as forward:
        out = fn()
    # Backward must run inside a mode too: its operators go through the dispatcher like any.
    with FlopCounter() as backward:
        out.backward(torch.ones_like(out))
    return {"forward": forward.flops, "backward": backward.flops}

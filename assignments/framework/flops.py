"""Counting FLOPs under the dispatcher: what students write in `flops.py` (README §2).

A `TorchDispatchMode` sees every aten operator that runs while it is active, forward and
backward alike, after autograd and before the kernel. `FlopCounter` uses that to count the
floating-point operations of the matrix products and convolutions, per aten operator, with the
formulas of README §2. You may not use `torch.utils.flop_counter` (the grader's reference).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# The aten operators counted, by their overload-packet name (`str(func.overloadpacket)`).
COUNTED_OPS = ("aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten.convolution",
               "aten.convolution_backward")


class FlopCounter(TorchDispatchMode):
    """Counts FLOPs per aten operator while active: `with FlopCounter() as counter: ...`.

    Contract:
    - Every call of an operator of `COUNTED_OPS` that runs while the mode is active adds its
      FLOPs (README §2: a multiply-add is 2 FLOPs; `mm` of `[m, k] @ [k, n]` is `2*m*n*k`;
      `addmm` the same, its bias not counted; `bmm`/`baddbmm` of `[b, m, k] @ [b, k, n]` is
      `2*b*m*n*k`; `convolution` (not transposed) is
      `2 * batch * prod(out_spatial) * c_out * weight.shape[1] * prod(kernel)`;
      `convolution_backward` counts that same product once for `grad_input` and once for
      `grad_weight`, each only when its entry of `output_mask` is true; the bias gradient is
      free). Operator overloads (`aten.mm.default`, `aten.mm.out`) count under their packet.
    - Every other operator runs unchanged and counts nothing; the mode never changes a value.
      Each operator runs exactly once: call `func(*args, **kwargs)` once and return its result.
    - It counts ops run in the backward pass too, when `.backward()` (or `torch.autograd.grad`)
      is called while it is active; a mode entered only around the forward sees none of them.
    - `flops` is the counts so far: `{packet name: total FLOPs (int)}`, one key per counted
      operator that ran at least once (absent otherwise), e.g. `{"aten.mm": 4096}`.
    - A fresh counter starts empty; entering it again keeps counting (never resets).
    - Deterministic: counts depend on shapes only (and `output_mask`), never on values.
    """

    def __init__(self) -> None:
        super().__init__()
        self._flops: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        raise NotImplementedError("FlopCounter.__torch_dispatch__: see README §2")

    @property
    def flops(self) -> dict[str, int]:
        """FLOPs so far per counted aten operator (a new dict; see the class docstring)."""
        return dict(self._flops)


def forward_backward_flops(fn: Callable[[], torch.Tensor]) -> dict[str, dict[str, int]]:
    """FLOPs of a forward pass and of its backward pass, counted apart (README §2).

    Calls `out = fn()` once inside one `FlopCounter` (the forward), then
    `out.backward(torch.ones_like(out))` once inside a second, fresh `FlopCounter` (the
    backward), and returns `{"forward": <first>.flops, "backward": <second>.flops}`.
    `out` is a floating tensor of any shape that requires grad. Gradients accumulate into the
    leaves' `.grad` as any backward does.
    """
    raise NotImplementedError("forward_backward_flops: see README §2")

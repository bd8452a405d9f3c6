"""FLOP counting below autograd (independent implementation, written from README §2)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

COUNTED_OPS = ("aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten.convolution",
               "aten.convolution_backward")


def _matmul_flops(a: torch.Tensor, b: torch.Tensor) -> int:
    # [.., m, k] @ [.., k, n]: every leading dimension of `a` multiplies the work.
    *lead, m, k = a.shape
    n = b.shape[-1]
    return 2 * math.prod(lead) * m * n * k


def _conv_flops(x_shape: Any, w_shape: Any, out_spatial: Any) -> int:
    batch = x_shape[0]
    c_out, c_in_per_group, *kernel = w_shape
    return 2 * batch * math.prod(out_spatial) * c_out * c_in_per_group * math.prod(kernel)


def _count(name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    def arg(i: int, key: str) -> Any:
        return args[i] if i < len(args) else kwargs[key]

    if name in ("aten.mm", "aten.bmm"):
        return _matmul_flops(arg(0, "self"), arg(1, "mat2"))
    if name == "aten.addmm":
        return _matmul_flops(arg(1, "mat1"), arg(2, "mat2"))
    if name == "aten.baddbmm":
        return _matmul_flops(arg(1, "batch1"), arg(2, "batch2"))
    if name == "aten.convolution":
        return _conv_flops(arg(0, "input").shape, arg(1, "weight").shape, out.shape[2:])
    # convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
    #                      dilation, transposed, output_padding, groups, output_mask)
    grad_out, x, w = arg(0, "grad_output"), arg(1, "input"), arg(2, "weight")
    mask = arg(10, "output_mask")
    once = _conv_flops(x.shape, w.shape, grad_out.shape[2:])
    return once * (int(bool(mask[0])) + int(bool(mask[1])))


class FlopCounter(TorchDispatchMode):
    """See the stub: FLOPs per counted aten operator while the mode is active."""

    def __init__(self) -> None:
        super().__init__()
        self._flops: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func.overloadpacket)
        if name in COUNTED_OPS:
            self._flops[name] = self._flops.get(name, 0) + _count(name, args, kwargs, out)
        return out

    @property
    def flops(self) -> dict[str, int]:
        return dict(self._flops)


def forward_backward_flops(fn: Callable[[], torch.Tensor]) -> dict[str, dict[str, int]]:
    """Forward FLOPs and backward FLOPs, each in a counter of its own."""
    fwd, bwd = FlopCounter(), FlopCounter()
    with fwd:
        out = fn()
    with bwd:
        out.backward(torch.ones_like(out))
    return {"forward": fwd.flops, "backward": bwd.flops}

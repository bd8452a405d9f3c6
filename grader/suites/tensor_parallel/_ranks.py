"""What travels to the ranks of the tensor_parallel hidden suite.

Rebuilding an `nn.Linear` from the dense weights the parent sent, and one forward/backward
step of a layer whose results the parent compares against `_ref`.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn


def build_linear(state: dict[str, torch.Tensor | None]) -> nn.Linear:
    """An nn.Linear holding copies of the dense weights the parent sent (plain torch)."""
    weight, bias = cast(torch.Tensor, state["weight"]), state["bias"]
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None,
                       dtype=weight.dtype)
    with torch.no_grad():
        linear.weight.copy_(weight)
        if bias is not None:
            linear.bias.copy_(bias)
    return linear


def leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_()


def param_grad(p: Any) -> torch.Tensor | None:
    return None if p is None else p.grad


def linear_step(layer: nn.Module, x: torch.Tensor, grad_y: torch.Tensor) -> dict[str, Any]:
    """Run a (sharded) linear layer on a leaf copy of `x` and backpropagate `grad_y`: the output
    `y`, `x_grad`, `weight_grad` and `bias_grad` (None without a bias), the keys of
    `dense_linear_run`."""
    x = leaf(x)
    y = layer(x)
    y.backward(grad_y)
    return {"y": y.detach(), "x_grad": x.grad, "weight_grad": param_grad(layer.weight),
            "bias_grad": param_grad(layer.bias)}

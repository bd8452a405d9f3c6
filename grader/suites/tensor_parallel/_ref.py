"""References of the tensor_parallel hidden suite, computed in the parent with plain torch.

Dense layers built from a seed, their forward and backward, the dense cross-entropy, the slice
of a dense tensor that belongs to a rank, the windows of the communication log, and the
checks of what the ranks returned.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from grader.compare import assert_close
from grader.seeds import seeded_generator, shifted
from grader.suites.tensor_parallel._cases import DTYPE, NOT_COMMUNICATION
from harness import CommRecord
from harness.commlog import as_log, windows

# ---- parent: dense references ------------------------------------------------------------------

def dense_linear(in_features: int, out_features: int, bias: bool, seed: int) -> nn.Linear:
    """nn.Linear initialised from `seed`, in float64."""
    torch.manual_seed(shifted(seed))
    return nn.Linear(in_features, out_features, bias=bias).to(DTYPE)


def linear_state(linear: nn.Linear) -> dict[str, torch.Tensor | None]:
    """What the parent sends a rank to rebuild `linear`: detached copies of weight and bias."""
    bias = None if linear.bias is None else linear.bias.detach().clone()
    return {"weight": linear.weight.detach().clone(), "bias": bias}


def randn(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=seeded_generator(seed), dtype=DTYPE)


def grads_of(linear: nn.Linear) -> dict[str, torch.Tensor | None]:
    return {"weight": linear.weight.grad,
            "bias": None if linear.bias is None else linear.bias.grad}


def dense_linear_run(linear: nn.Linear, x: torch.Tensor,
                     grad_out: torch.Tensor) -> dict[str, Any]:
    """Output, input gradient and parameter gradients of `linear` for upstream `grad_out`."""
    linear.zero_grad()
    x = x.clone().requires_grad_()
    y = linear(x)
    y.backward(grad_out)
    return {"y": y.detach(), "x_grad": x.grad, **{f"{k}_grad": v
                                                   for k, v in grads_of(linear).items()}}


def dense_linear_case(in_features: int, out_features: int, bias: bool, seed: int
                      ) -> dict[str, Any]:
    """One layer test's data: the dense layer's `state` (from `seed`), an input `x` [2, 3, in]
    and an upstream gradient `grad_y` [2, 3, out] (from seed + 100 and seed + 200), and the
    dense results `expected` (`dense_linear_run`)."""
    linear = dense_linear(in_features, out_features, bias, seed)
    x = randn(seed + 100, 2, 3, in_features)
    grad_y = randn(seed + 200, 2, 3, out_features)
    return {"state": linear_state(linear), "x": x, "grad_y": grad_y,
            "expected": dense_linear_run(linear, x, grad_y)}


def dense_mlp_run(up: nn.Linear, down: nn.Linear, x: torch.Tensor,
                  grad_out: torch.Tensor) -> dict[str, Any]:
    """The dense MLP down(gelu(up(x))): output and every gradient."""
    up.zero_grad()
    down.zero_grad()
    x = x.clone().requires_grad_()
    y = down(F.gelu(up(x)))
    y.backward(grad_out)
    return {"y": y.detach(), "x_grad": x.grad, "up": grads_of(up), "down": grads_of(down)}


def dense_cross_entropy(logits: torch.Tensor, target: torch.Tensor,
                        loss_weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token loss [...] and the gradient of sum(loss * loss_weight) w.r.t. the logits."""
    logits = logits.clone().requires_grad_()
    loss = F.cross_entropy(logits.flatten(0, -2), target.flatten(), reduction="none")
    loss = loss.reshape(target.shape)
    (loss * loss_weight).sum().backward()
    return loss.detach(), logits.grad


def shard(t: torch.Tensor | None, rank: int, world: int, dim: int = -1) -> torch.Tensor | None:
    """Slice `rank` of `world` equal slices of `t` along `dim`."""
    if t is None:
        return None
    width = t.shape[dim] // world
    return t.narrow(dim, rank * width, width)


# ---- parent: reading what the ranks returned ---------------------------------------------------

def check(actual: Any, expected: torch.Tensor | None, what: str, hint: str = "") -> None:
    """`assert_close` with the hint first (`hint_first`), that also accepts None == None (a
    bias-less layer's bias and its grad)."""
    if expected is None:
        if actual is not None:
            raise AssertionError(f"{what}: expected None (no bias), got a "
                                 f"{type(actual).__name__}")
        return
    assert_close(actual, expected, what=what, hint=hint, hint_first=True)


def comm_windows(result: Any, rank: int) -> defaultdict[str, list[CommRecord]]:
    """Rank `rank`'s wire log cut at its marks (`harness.commlog.windows` of
    `harness.commlog.as_log`); a phase in which nothing was carried is an empty window."""
    return defaultdict(list, windows(as_log(result.wire[rank])))


def describe(records: list[CommRecord]) -> str:
    calls = [f"{r.op}({r.numel})" for r in records if r.op not in NOT_COMMUNICATION]
    return ", ".join(calls) if calls else "no communication"

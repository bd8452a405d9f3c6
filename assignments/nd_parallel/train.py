"""2D and 3D training of a small residual MLP: tensor parallelism inside data parallelism
(README §4–§5).

The model (README §4), dense form. `params` maps names to tensors, for blocks i = 0 … n−1:
`f"{i}.w1"` [ffn, hidden], `f"{i}.b1"` [ffn], `f"{i}.w2"` [hidden, ffn], `f"{i}.b2"` [hidden]
(n is the number of distinct block indices in the keys, all blocks the same sizes). With x
[rows, hidden], block i computes
    x = x + gelu(x @ w1ᵀ + b1) @ w2ᵀ + b2        (gelu: the exact, erf form)
in order i = 0, 1, …; the loss of a batch is the mean over all its elements of (x_out − y)².

Training is SGD with momentum μ, as `torch.optim.SGD(lr=lr, momentum=μ)` does it (no
dampening, no Nesterov, no weight decay): at step 1 the buffer is the gradient, after that
buf = μ·buf + grad; then p = p − lr·buf. The gradient of every step is that of the loss of
the *whole* global batch of the step (the mean over all its rows), whatever the layout.

Tensor-parallel sharding (Megatron's MLP): with T ranks in the TP group and TP rank j, w1 and
b1 keep rows [j·ffn/T, (j+1)·ffn/T) (ColumnParallelLinear), w2 keeps the same columns
(RowParallelLinear), b2 is replicated whole. Data-parallel sharding: a global batch of B rows
gives replica k of D rows [k·B/D, (k+1)·B/D).

Tensors are CPU tensors under gloo; any floating dtype (the tests use float64), kept. Inputs
are never modified in place; returned tensors are new, detached and contiguous.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

# The provided tensor-parallel layers (read-only): use them for the TP model.
from assignments.nd_parallel.tp_layers import ColumnParallelLinear, RowParallelLinear  # noqa: F401


def shard_params(params: dict[str, torch.Tensor], tp_rank: int, tp_size: int
                 ) -> dict[str, torch.Tensor]:
    """This TP rank's shards of the dense `params` (module docstring), same keys.

    w1 and b1 keep rows [tp_rank·ffn/tp_size, (tp_rank+1)·ffn/tp_size), w2 the same columns,
    b2 whole. Pure: no communication; new contiguous tensors, `params` left unchanged.

    Raises:
        ValueError: ffn not divisible by tp_size, or tp_rank outside [0, tp_size).
    """
    raise NotImplementedError("shard_params: see README §4")


def train_2d(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, *, lr: float,
             momentum: float, steps: int, tp_group: dist.ProcessGroup,
             dp_group: dist.ProcessGroup) -> dict[str, torch.Tensor]:
    """Train the model `steps` SGD-momentum steps on a (dp, tp) mesh; this rank's final shards.

    Args:
        params: the dense initial parameters (module docstring), the same on every rank.
        x, y: [steps, B, hidden], the global batch of every step, the same on every rank.
        lr, momentum: SGD's (module docstring).
        steps: how many steps, >= 1; x.shape[0] == y.shape[0] == steps.
        tp_group: this rank's tensor-parallel group (TP rank j = dist.get_rank(tp_group),
            T = its size); dp_group: its data-parallel group (replica k = dist.get_rank(
            dp_group), D = its size). Every rank is in exactly one of each.

    At step s the rank runs the TP model (the provided `tp_layers`) on rows
    [k·B/D, (k+1)·B/D) of x[s], and the D replicas' gradients are averaged. Communication:
    only the TP layers' all-reduces on tp_group, and the gradient averaging on dp_group: each
    element of this rank's gradient all-reduced once per step (one call per tensor or a flat
    buffer, SUM then divide, or AVG), nothing on any other group. With D = 1 that all-reduce
    changes nothing: running it or skipping it are both correct.

    Returns:
        This rank's shards after the last step, as `shard_params(final, j, T)` would cut the
        final dense parameters: a new dict, same keys.

    Raises:
        ValueError: B not divisible by D or ffn not divisible by T, before any communication.
    """
    raise NotImplementedError("train_2d: see README §4")


def train_3d(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, *, lr: float,
             momentum: float, steps: int, tp_group: dist.ProcessGroup,
             dp_group: dist.ProcessGroup, zero_group: dist.ProcessGroup
             ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Train on a (dp, zero, tp) mesh with ZeRO-1 over the zero axis (README §5).

    Args:
        params, x, y, lr, momentum, steps: as `train_2d`.
        tp_group: this rank's TP group (rank j of T).
        dp_group, zero_group: its groups on the two data-parallel axes (ranks a of D and
            z of Z). Replica index k = a·Z + z of D·Z replicas: the rank trains on rows
            [k·B/(D·Z), (k+1)·B/(D·Z)) of each step's batch, and the gradient is averaged
            over all D·Z replicas.

    ZeRO-1: flatten this rank's shards (as `shard_params` cuts them), each row-major, in the
    order of their names sorted as strings, into one vector of n elements; zero rank z owns
    elements [z·n/Z, (z+1)·n/Z). Each rank keeps the momentum buffer of its own elements only,
    updates only those, and the updated parameters reach every zero rank by an all-gather over
    zero_group. Communication only on tp_group (the TP layers), dp_group and zero_group;
    nothing on the default group or any other group.

    Returns:
        (shards, momentum): this rank's parameter shards after the last step (as `train_2d`)
        and its momentum buffer chunk after the last step, a new 1-D tensor of n/Z elements
        (elements [z·n/Z, (z+1)·n/Z) of the flat momentum).

    Raises:
        ValueError: B not divisible by D·Z, ffn not divisible by T, or n not divisible by Z,
        before any communication.
    """
    raise NotImplementedError("train_3d: see README §5")

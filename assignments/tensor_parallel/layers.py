"""Tensor-parallel layers: the module you write.

Read assignments/tensor_parallel/README.md first. Conventions used by every function below:

- `group` is the tensor-parallel process group (None: the default group). p is its size,
  `dist.get_world_size(group)`, and r this rank's position in it, `dist.get_rank(group)`.
  Slices are taken by r, never by the global rank: with two groups [0, 1] and [2, 3], global
  rank 2 is r = 0 of its group.
- "Slice r of n along a dim" means elements [r*n/p, (r+1)*n/p) of it; n must be divisible by p.
- Every communication goes through `group` and uses only `dist.all_reduce` and `dist.all_gather`
  (or `dist.all_gather_into_tensor`). Tensors are CPU tensors under gloo, CUDA ones under NCCL.
- Functions return new tensors and never modify their inputs in place.
- Dtypes: any floating dtype (the tests use float64 and float32); outputs keep the input dtype.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

# ---- the four conjugate operators (README §3) -------------------------------------------------


def copy_to_parallel_region(x: torch.Tensor,
                            group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """f: identity in forward, all-reduce (sum) of the gradient over `group` in backward.

    Args:
        x: any shape; the same values on every rank of `group` (a replicated activation).

    Returns:
        A tensor equal to `x` (same shape and dtype). Forward makes no communication call. In
        backward, the gradient that reaches `x` is the sum over the group of the gradients each
        rank's output received: exactly one `dist.all_reduce` of `x.numel()` elements.
    """
    raise NotImplementedError("copy_to_parallel_region: see README §3")


def reduce_from_parallel_region(x: torch.Tensor,
                                group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """g: all-reduce (sum) over `group` in forward, identity in backward.

    Args:
        x: any shape; this rank's partial result. Not modified.

    Returns:
        A new tensor, the sum of every group rank's `x`: exactly one `dist.all_reduce` of
        `x.numel()` elements. Backward passes the output's gradient to `x` unchanged, with no
        communication.
    """
    raise NotImplementedError("reduce_from_parallel_region: see README §3")


def scatter_to_parallel_region(x: torch.Tensor,
                               group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Keep this rank's slice of the last dim of `x`; backward all-gathers the gradient.

    Args:
        x: [..., n], the same values on every rank; n divisible by p.

    Returns:
        A new contiguous tensor [..., n/p]: slice r of the last dim. No communication in
        forward. In backward, the gradient of `x` is [..., n], the concatenation along the last
        dim of every group rank's output gradient, in group-rank order (one all-gather).

    Raises:
        ValueError: n is not divisible by p (the message names both).
    """
    raise NotImplementedError("scatter_to_parallel_region: see README §3")


def gather_from_parallel_region(x: torch.Tensor,
                                group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """All-gather `x` along the last dim; backward keeps this rank's slice of the gradient.

    Args:
        x: [..., m], the same shape on every rank of `group`.

    Returns:
        A new tensor [..., m*p]: every group rank's `x` concatenated along the last dim in
        group-rank order (one all-gather). In backward the gradient of `x` is slice r of the
        output's gradient along the last dim, with no communication (the output is replicated,
        so each rank already holds the whole gradient).
    """
    raise NotImplementedError("gather_from_parallel_region: see README §3")


# ---- layers (README §4, §5) -------------------------------------------------------------------


class ColumnParallelLinear(nn.Module):
    """y = x W^T + b with the dense weight's rows (output features) split over the group.

    Attributes:
        weight: nn.Parameter [out_features/p, in_features]: rows slice r of the dense weight.
        bias: nn.Parameter [out_features/p] (slice r of the dense bias) or None.
        Parameters hold only this rank's shard: nothing else the size of the dense layer.

    forward(x): x is [..., in_features], replicated on the group. Returns [..., out_features/p]
    (this rank's output features), or [..., out_features] on every rank with gather_output=True.
    The input's gradient is the full dense one on every rank (f before the matmul); the weight
    and bias gradients are slice r of the dense ones. No communication in forward unless
    gather_output (then one all-gather).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 gather_output: bool = False, group: dist.ProcessGroup | None = None) -> None:
        """Random shard, initialised like nn.Linear(in_features, out_features): each element
        drawn from U(-1/sqrt(in_features), 1/sqrt(in_features)), float32.

        Raises:
            ValueError: out_features is not divisible by p (the message names both).
        """
        super().__init__()
        raise NotImplementedError("ColumnParallelLinear: see README §4")

    @classmethod
    def from_dense(cls, linear: nn.Linear, gather_output: bool = False,
                   group: dist.ProcessGroup | None = None) -> ColumnParallelLinear:
        """The shard of `linear` for this rank: rows slice r of its weight and bias.

        Copies the slices (same dtype and device as `linear`), so the dense layer can be freed:
        the new module must not keep a view into `linear`'s storage. No communication.

        Raises:
            ValueError: linear.out_features is not divisible by p.
        """
        raise NotImplementedError("ColumnParallelLinear.from_dense: see README §4")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("ColumnParallelLinear.forward: see README §4")


class RowParallelLinear(nn.Module):
    """y = x W^T + b with the dense weight's columns (input features) split over the group.

    Attributes:
        weight: nn.Parameter [out_features, in_features/p]: columns slice r of the dense weight.
        bias: nn.Parameter [out_features], the whole dense bias on every rank, or None. It is
        added once, after the all-reduce.

    forward(x): with input_is_parallel=True, x is [..., in_features/p] (slice r of the input
    features, e.g. a ColumnParallelLinear's output); with input_is_parallel=False, x is
    [..., in_features], replicated, and the layer keeps slice r itself (scatter). Returns
    [..., out_features], the full dense output on every rank, after exactly one all-reduce in
    forward. Gradients: the input's is slice r of the dense one (input_is_parallel=True) or the
    full dense one (False); the weight's is columns slice r of the dense one; the bias's is the
    full dense one on every rank. No communication in backward when input_is_parallel=True.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 input_is_parallel: bool = True,
                 group: dist.ProcessGroup | None = None) -> None:
        """Random shard, initialised like nn.Linear(in_features, out_features): each element
        drawn from U(-1/sqrt(in_features), 1/sqrt(in_features)), float32.

        Raises:
            ValueError: in_features is not divisible by p (the message names both).
        """
        super().__init__()
        raise NotImplementedError("RowParallelLinear: see README §5")

    @classmethod
    def from_dense(cls, linear: nn.Linear, input_is_parallel: bool = True,
                   group: dist.ProcessGroup | None = None) -> RowParallelLinear:
        """The shard of `linear` for this rank: columns slice r of its weight, its whole bias
        (or None when linear.bias is None).

        Copies (same dtype and device as `linear`); no view into `linear`'s storage. No
        communication.

        Raises:
            ValueError: linear.in_features is not divisible by p.
        """
        raise NotImplementedError("RowParallelLinear.from_dense: see README §5")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("RowParallelLinear.forward: see README §5")


class ParallelMLP(nn.Module):
    """down(gelu(up(x))), sharded: `up` column-parallel, `down` row-parallel.

    Attributes:
        up: ColumnParallelLinear(hidden, ffn_hidden, gather_output=False).
        down: RowParallelLinear(ffn_hidden, hidden, input_is_parallel=True).
    GELU is the exact one, `torch.nn.functional.gelu(h)` (approximate="none").

    forward(x): x [batch, seq, hidden] (any leading dims), replicated. Returns the dense MLP's
    output [batch, seq, hidden] on every rank. Cost budget: exactly one all-reduce of
    batch*seq*hidden elements in forward, exactly one of the same size in backward (when x
    requires grad), and no other communication. Parameters per rank: 1/p of the dense weights
    and of up's bias, plus down's whole bias.
    """

    def __init__(self, hidden: int, ffn_hidden: int, bias: bool = True,
                 group: dist.ProcessGroup | None = None) -> None:
        """Random shards (see the two layers).

        Raises:
            ValueError: ffn_hidden is not divisible by p.
        """
        super().__init__()
        raise NotImplementedError("ParallelMLP: see README §6")

    @classmethod
    def from_dense(cls, up: nn.Linear, down: nn.Linear,
                   group: dist.ProcessGroup | None = None) -> ParallelMLP:
        """Shard the dense MLP down(gelu(up(x))): `up` [ffn_hidden, hidden] by rows, `down`
        [hidden, ffn_hidden] by columns. Copies; no communication.

        Raises:
            ValueError: ffn_hidden is not divisible by p.
        """
        raise NotImplementedError("ParallelMLP.from_dense: see README §6")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("ParallelMLP.forward: see README §6")


# ---- vocab-parallel cross-entropy (README §7) -------------------------------------------------


def vocab_parallel_cross_entropy(logits_shard: torch.Tensor, target: torch.Tensor,
                                 group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Per-token cross-entropy when the vocabulary is split over `group`.

    Args:
        logits_shard: [..., V/p], floating: vocabulary slice r of the full logits [..., V]
            (token ids [r*V/p, (r+1)*V/p)). Not modified.
        target: [...] int64, the same on every rank: global token ids in [0, V).

    Returns:
        [...], logits_shard's dtype: equal to
        `F.cross_entropy(full_logits.flatten(0, -2), target.flatten(), reduction="none")`
        reshaped to target's shape, on every rank, and stable for large logits (|z| ~ 1e4).
        Differentiable: the gradient reaching `logits_shard` is vocabulary slice r of the
        dense one, on every backward (a graph kept with retain_graph=True gives it again).

    Communication: never gathers the logits. Every call, forward or backward, is a
    `dist.all_reduce` of per-token values, at most 3 values per token in one call (e.g. the
    max, the target's logit and the sum of exponentials, each shaped like `target`). Backward
    can do without any.

    Raises:
        ValueError: target's shape is not logits_shard's shape without the last dim.
    """
    raise NotImplementedError("vocab_parallel_cross_entropy: see README §7")

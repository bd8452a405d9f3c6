"""Tensor-parallel layers: the f/g operators, column- and row-parallel linears, a TP MLP and a
vocab-parallel cross-entropy (reference solution).

A tensor-parallel group of p ranks holds one layer between them. A column-parallel linear keeps
rows [r*out/p, (r+1)*out/p) of the dense weight [out, in] on rank r, so each rank computes a
slice of the output features from the full input. A row-parallel linear keeps columns
[r*in/p, (r+1)*in/p), so each rank computes a partial sum of the full output from a slice of the
input features, and one all-reduce adds the partial sums. The MLP puts the two back to back: the
slice of features the column layer produces is exactly the slice the row layer consumes, and the
GELU between them is elementwise, so nothing moves between the two (Megatron-LM, Shoeybi et al.
2019, section 3 and figure 3). See assignments/tensor_parallel/README.md.

All torch.distributed calls of this module sit in the first section ("communication"), so they
can be counted against the cost model: `_all_reduce_` and `_all_gather_last_dim` are the only
places that communicate.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

# ---- communication: the only torch.distributed calls of this module ---------------------------


def _all_reduce_(tensor: torch.Tensor, group: dist.ProcessGroup | None,
                 op: dist.ReduceOp.RedOpType = dist.ReduceOp.SUM) -> torch.Tensor:
    """All-reduce a contiguous tensor in place over `group` and return it."""
    dist.all_reduce(tensor, op=op, group=group)
    return tensor


def _all_gather_last_dim(x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    """Concatenate every group rank's `x` along the last dim, in group-rank order."""
    size = dist.get_world_size(group)
    x = x.contiguous()
    parts = [torch.empty_like(x) for _ in range(size)]
    dist.all_gather(parts, x, group=group)
    return torch.cat(parts, dim=-1)


# ---- local helpers ----------------------------------------------------------------------------


def _rank_and_size(group: dist.ProcessGroup | None) -> tuple[int, int]:
    """This rank's position in `group` (None: the default group) and the group's size."""
    return dist.get_rank(group), dist.get_world_size(group)


def _shard_size(total: int, tp_size: int, what: str) -> int:
    """`total // tp_size`, or ValueError naming both sizes when it does not divide."""
    if total % tp_size != 0:
        raise ValueError(f"{what}={total} is not divisible by the tensor-parallel size "
                         f"{tp_size}; pick sizes that are multiples of the group size")
    return total // tp_size


def _my_slice_last_dim(x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    """This rank's contiguous slice of the last dim of `x` (a new tensor, not a view)."""
    tp_rank, tp_size = _rank_and_size(group)
    width = _shard_size(x.shape[-1], tp_size, "last dimension")
    mine = x[..., tp_rank * width:(tp_rank + 1) * width]
    return mine.clone(memory_format=torch.contiguous_format)


def _init_uniform_(tensor: torch.Tensor, fan_in: int) -> None:
    """nn.Linear's default init for a layer of `fan_in` inputs: U(-1/sqrt(fan_in), ...)."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    nn.init.uniform_(tensor, -bound, bound)


# ---- the four conjugate operators -------------------------------------------------------------


class _CopyToParallelRegion(torch.autograd.Function):
    """f: the input is replicated, so forward is free; each rank's gradient covers only its part
    of the layer that follows, so backward sums them."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _all_reduce_(grad.clone(memory_format=torch.contiguous_format), ctx.group), None


class _ReduceFromParallelRegion(torch.autograd.Function):
    """g: the conjugate of f. Forward sums the partial results; the sum's gradient reaches each
    term unchanged, so backward is free."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
        return _all_reduce_(x.clone(memory_format=torch.contiguous_format), group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class _ScatterToParallelRegion(torch.autograd.Function):
    """Keep this rank's slice of the last dim; backward puts the slices back together."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
        ctx.group = group
        return _my_slice_last_dim(x, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _all_gather_last_dim(grad, ctx.group), None


class _GatherFromParallelRegion(torch.autograd.Function):
    """All-gather along the last dim; backward keeps this rank's slice of the gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
        ctx.group = group
        return _all_gather_last_dim(x, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _my_slice_last_dim(grad, ctx.group), None


def copy_to_parallel_region(x: torch.Tensor,
                            group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """f: identity forward, all-reduce (sum) of the gradient over `group` in backward."""
    return _CopyToParallelRegion.apply(x, group)


def reduce_from_parallel_region(x: torch.Tensor,
                                group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """g: all-reduce (sum) over `group` forward, identity backward. `x` is not modified."""
    return _ReduceFromParallelRegion.apply(x, group)


def scatter_to_parallel_region(x: torch.Tensor,
                               group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """This rank's slice of the last dim of `x`; backward all-gathers the gradient slices."""
    return _ScatterToParallelRegion.apply(x, group)


def gather_from_parallel_region(x: torch.Tensor,
                                group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """All-gather `x` along the last dim in group-rank order; backward keeps this rank's slice."""
    return _GatherFromParallelRegion.apply(x, group)


# ---- layers -----------------------------------------------------------------------------------


class ColumnParallelLinear(nn.Module):
    """y = x W^T + b with W's output features (rows) split over the group.

    `weight` is [out_features/p, in_features], `bias` [out_features/p] or None: rows
    [r*out/p, (r+1)*out/p) of the dense layer on group rank r.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 gather_output: bool = False, group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        tp_rank, tp_size = _rank_and_size(group)
        self.in_features, self.out_features = in_features, out_features
        self.gather_output, self.group = gather_output, group
        self.out_per_rank = _shard_size(out_features, tp_size, "out_features")
        self.weight = nn.Parameter(torch.empty(self.out_per_rank, in_features))
        _init_uniform_(self.weight, in_features)
        self.bias = None
        if bias:
            self.bias = nn.Parameter(torch.empty(self.out_per_rank))
            _init_uniform_(self.bias, in_features)

    @classmethod
    def from_dense(cls, linear: nn.Linear, gather_output: bool = False,
                   group: dist.ProcessGroup | None = None) -> ColumnParallelLinear:
        """This rank's rows of `linear` (copied, so the dense weight can be freed)."""
        layer = cls(linear.in_features, linear.out_features, bias=linear.bias is not None,
                    gather_output=gather_output, group=group)
        tp_rank, _ = _rank_and_size(group)
        rows = slice(tp_rank * layer.out_per_rank, (tp_rank + 1) * layer.out_per_rank)
        layer.weight = nn.Parameter(linear.weight.detach()[rows].clone())
        if linear.bias is not None:
            layer.bias = nn.Parameter(linear.bias.detach()[rows].clone())
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Each rank needs the whole input; its gradient is the sum over the ranks' slices.
        x = copy_to_parallel_region(x, self.group)
        y = F.linear(x, self.weight, self.bias)
        return gather_from_parallel_region(y, self.group) if self.gather_output else y


class RowParallelLinear(nn.Module):
    """y = x W^T + b with W's input features (columns) split over the group.

    `weight` is [out_features, in_features/p]: columns [r*in/p, (r+1)*in/p) of the dense layer
    on group rank r. `bias` [out_features] is replicated and added once, after the all-reduce.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 input_is_parallel: bool = True,
                 group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        tp_rank, tp_size = _rank_and_size(group)
        self.in_features, self.out_features = in_features, out_features
        self.input_is_parallel, self.group = input_is_parallel, group
        self.in_per_rank = _shard_size(in_features, tp_size, "in_features")
        self.weight = nn.Parameter(torch.empty(out_features, self.in_per_rank))
        _init_uniform_(self.weight, in_features)
        self.bias = None
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features))
            _init_uniform_(self.bias, in_features)

    @classmethod
    def from_dense(cls, linear: nn.Linear, input_is_parallel: bool = True,
                   group: dist.ProcessGroup | None = None) -> RowParallelLinear:
        """This rank's columns of `linear` and its whole bias (copied)."""
        layer = cls(linear.in_features, linear.out_features, bias=linear.bias is not None,
                    input_is_parallel=input_is_parallel, group=group)
        tp_rank, _ = _rank_and_size(group)
        cols = slice(tp_rank * layer.in_per_rank, (tp_rank + 1) * layer.in_per_rank)
        # A column slice is strided; .clone() makes a compact copy of only these columns.
        layer.weight = nn.Parameter(linear.weight.detach()[:, cols].clone())
        if linear.bias is not None:
            layer.bias = nn.Parameter(linear.bias.detach().clone())
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.input_is_parallel:
            x = scatter_to_parallel_region(x, self.group)
        partial = F.linear(x, self.weight)
        y = reduce_from_parallel_region(partial, self.group)
        # After the sum: adding the bias to each partial sum would count it p times.
        return y + self.bias if self.bias is not None else y


class ParallelMLP(nn.Module):
    """down(gelu(up(x))) with `up` column-parallel and `down` row-parallel.

    `up`: ColumnParallelLinear(hidden, ffn_hidden, gather_output=False); `down`:
    RowParallelLinear(ffn_hidden, hidden, input_is_parallel=True). GELU is the exact (erf) one.
    """

    def __init__(self, hidden: int, ffn_hidden: int, bias: bool = True,
                 group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        self.up = ColumnParallelLinear(hidden, ffn_hidden, bias=bias, gather_output=False,
                                       group=group)
        self.down = RowParallelLinear(ffn_hidden, hidden, bias=bias, input_is_parallel=True,
                                      group=group)

    @classmethod
    def from_dense(cls, up: nn.Linear, down: nn.Linear,
                   group: dist.ProcessGroup | None = None) -> ParallelMLP:
        """Shard a dense MLP `down(gelu(up(x)))`: `up` by rows, `down` by columns."""
        if down.in_features != up.out_features or down.out_features != up.in_features:
            raise ValueError(f"up is {up.in_features}->{up.out_features} and down is "
                             f"{down.in_features}->{down.out_features}; an MLP needs "
                             f"hidden->ffn_hidden then ffn_hidden->hidden")
        mlp = cls.__new__(cls)
        nn.Module.__init__(mlp)
        mlp.up = ColumnParallelLinear.from_dense(up, gather_output=False, group=group)
        mlp.down = RowParallelLinear.from_dense(down, input_is_parallel=True, group=group)
        return mlp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The column layer's output slice is the row layer's input slice, and GELU acts on each
        # element alone: one all-reduce (in `down`) forward, one (in `up`'s f) backward.
        return self.down(F.gelu(self.up(x)))


# ---- vocab-parallel cross-entropy -------------------------------------------------------------


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """loss = log(sum_v exp(z_v - m)) - (z_target - m), with m the global max of z.

    Only per-token scalars cross ranks: the max, the target's logit (non-zero on its owner
    only) and the sum of exponentials. Backward needs no communication: d loss / d z_v =
    softmax_v - [v == target], and each rank owns its softmax slice.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor,
                group: dist.ProcessGroup | None) -> torch.Tensor:
        tp_rank, _ = _rank_and_size(group)
        vocab_per_rank = logits.shape[-1]
        vocab_start = tp_rank * vocab_per_rank

        # Subtract the max over the WHOLE vocabulary: exp() of a shard's own shift would put
        # each rank's sum on a different scale.
        logits_max = logits.amax(dim=-1)
        _all_reduce_(logits_max, group, op=dist.ReduceOp.MAX)
        shifted = logits - logits_max.unsqueeze(-1)

        local_target = target - vocab_start
        in_shard = (local_target >= 0) & (local_target < vocab_per_rank)
        local_target = torch.where(in_shard, local_target, torch.zeros_like(local_target))
        target_logit = shifted.gather(-1, local_target.unsqueeze(-1)).squeeze(-1)
        target_logit = torch.where(in_shard, target_logit, torch.zeros_like(target_logit))
        _all_reduce_(target_logit, group)

        exp = shifted.exp()
        sum_exp = exp.sum(dim=-1)
        _all_reduce_(sum_exp, group)

        softmax = exp.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(softmax, local_target, in_shard)
        return sum_exp.log() - target_logit

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        softmax, local_target, in_shard = ctx.saved_tensors
        grad = softmax.clone()
        one_hot = in_shard.to(grad.dtype).unsqueeze(-1)
        grad.scatter_add_(-1, local_target.unsqueeze(-1), -one_hot)
        return grad * grad_loss.unsqueeze(-1), None, None


def vocab_parallel_cross_entropy(logits_shard: torch.Tensor, target: torch.Tensor,
                                 group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Per-token cross-entropy over a vocabulary split across `group` (see the stub)."""
    if tuple(target.shape) != tuple(logits_shard.shape[:-1]):
        raise ValueError(f"target has shape {tuple(target.shape)}; it must be logits_shard's "
                         f"shape without the vocab dim, {tuple(logits_shard.shape[:-1])}")
    return _VocabParallelCrossEntropy.apply(logits_shard, target, group)

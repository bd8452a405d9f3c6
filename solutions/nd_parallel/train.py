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
import torch.nn.functional as F
from torch import nn

from assignments.nd_parallel.tp_layers import ColumnParallelLinear, RowParallelLinear


def _blocks(params: dict[str, torch.Tensor]) -> list[int]:
    return sorted({int(name.split(".")[0]) for name in params})


def shard_params(params: dict[str, torch.Tensor], tp_rank: int, tp_size: int
                 ) -> dict[str, torch.Tensor]:
    """This TP rank's shards of the dense `params` (module docstring), same keys.

    w1 and b1 keep rows [tp_rank·ffn/tp_size, (tp_rank+1)·ffn/tp_size), w2 the same columns,
    b2 whole. Pure: no communication; new contiguous tensors, `params` left unchanged.

    Raises:
        ValueError: ffn not divisible by tp_size, or tp_rank outside [0, tp_size).
    """
    if not 0 <= tp_rank < tp_size:
        raise ValueError(f"tp_rank {tp_rank} outside [0, {tp_size})")
    out: dict[str, torch.Tensor] = {}
    for name, tensor in params.items():
        kind = name.split(".")[1]
        if kind == "b2":
            out[name] = tensor.detach().clone().contiguous()
            continue
        ffn = tensor.shape[0] if kind in ("w1", "b1") else tensor.shape[1]
        if ffn % tp_size:
            raise ValueError(f"ffn {ffn} does not split over {tp_size} TP ranks")
        width = ffn // tp_size
        lo = tp_rank * width
        piece = tensor[lo:lo + width] if kind in ("w1", "b1") else tensor[:, lo:lo + width]
        out[name] = piece.detach().clone().contiguous()
    return out


class _TPBlock(nn.Module):
    """One residual MLP block: column-parallel up, gelu, row-parallel down (one g all-reduce)."""

    def __init__(self, shards: dict[str, torch.Tensor], i: int,
                 group: dist.ProcessGroup) -> None:
        super().__init__()
        self.up = ColumnParallelLinear(shards[f"{i}.w1"], shards[f"{i}.b1"], group)
        self.down = RowParallelLinear(shards[f"{i}.w2"], shards[f"{i}.b2"], group)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(x)))


def _model(shards: dict[str, torch.Tensor], group: dist.ProcessGroup
           ) -> tuple[nn.Sequential, dict[str, nn.Parameter]]:
    """The TP model and its parameters by name (the same names as `params`)."""
    blocks = [_TPBlock(shards, i, group) for i in _blocks(shards)]
    named = {}
    for i, block in zip(_blocks(shards), blocks):
        named.update({f"{i}.w1": block.up.weight, f"{i}.b1": block.up.bias,
                      f"{i}.w2": block.down.weight, f"{i}.b2": block.down.bias})
    return nn.Sequential(*blocks), named


def _rows(batch: int, replicas: int, replica: int) -> slice:
    if batch % replicas:
        raise ValueError(f"batch {batch} does not split over {replicas} data-parallel replicas")
    width = batch // replicas
    return slice(replica * width, (replica + 1) * width)


def _local_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    """Backward of this replica's mean loss: the gradients land in the parameters' .grad."""
    model.zero_grad(set_to_none=True)
    F.mse_loss(model(x), y).backward()


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
    buffer, SUM then divide, or AVG), nothing on any other group.

    Returns:
        This rank's shards after the last step, as `shard_params(final, j, T)` would cut the
        final dense parameters: a new dict, same keys.

    Raises:
        ValueError: B not divisible by D or ffn not divisible by T, before any communication.
    """
    tp_rank, dp_rank = dist.get_rank(tp_group), dist.get_rank(dp_group)
    dp_size = dist.get_world_size(dp_group)
    rows = _rows(x.shape[1], dp_size, dp_rank)
    shards = shard_params(params, tp_rank, dist.get_world_size(tp_group))
    model, named = _model(shards, tp_group)
    buffers: dict[str, torch.Tensor] = {}
    for step in range(steps):
        # Same rows on every TP rank of a replica; each replica its own slice of the batch.
        _local_grads(model, x[step, rows], y[step, rows])
        for param in named.values():
            # Average over the DP axis only: TP ranks hold different shards (or, for b2, the
            # same gradient already), so the TP axis must not be summed here.
            grad = param.grad
            assert grad is not None
            dist.all_reduce(grad, group=dp_group)
            grad /= dp_size
        with torch.no_grad():
            for name, param in named.items():
                grad = param.grad
                assert grad is not None
                buf = buffers.get(name)
                buffers[name] = grad.clone() if buf is None else buf.mul_(momentum).add_(grad)
                param -= lr * buffers[name]
    return {name: param.detach().clone().contiguous() for name, param in named.items()}


def _flat_order(params: dict[str, torch.Tensor]) -> list[str]:
    """The order of ZeRO-1's flat vector: the parameter names sorted as strings."""
    return sorted(params)


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
    tp_rank, dp_rank, zero_rank = (dist.get_rank(g) for g in (tp_group, dp_group, zero_group))
    dp_size, zero_size = dist.get_world_size(dp_group), dist.get_world_size(zero_group)
    replicas = dp_size * zero_size
    rows = _rows(x.shape[1], replicas, dp_rank * zero_size + zero_rank)
    shards = shard_params(params, tp_rank, dist.get_world_size(tp_group))
    order = _flat_order(shards)
    numel = sum(shards[name].numel() for name in order)
    if numel % zero_size:
        raise ValueError(f"{numel} local parameters do not split over {zero_size} zero ranks")
    chunk = numel // zero_size
    mine = slice(zero_rank * chunk, (zero_rank + 1) * chunk)
    model, named = _model(shards, tp_group)
    buf: torch.Tensor | None = None
    for step in range(steps):
        _local_grads(model, x[step, rows], y[step, rows])
        flat_grad = torch.cat([named[n].grad.reshape(-1) for n in order])  # type: ignore[union-attr]
        # Reduce-scatter inside the zero axis, then all-reduce only my chunk across dp:
        # together a sum over all D·Z replicas, each element crossing each axis once.
        pieces = list(flat_grad.chunk(zero_size))
        grad_chunk = torch.empty_like(pieces[0])
        dist.reduce_scatter(grad_chunk, pieces, group=zero_group)
        dist.all_reduce(grad_chunk, group=dp_group)
        grad_chunk /= replicas
        buf = grad_chunk.clone() if buf is None else buf.mul_(momentum).add_(grad_chunk)
        with torch.no_grad():
            flat_param = torch.cat([named[n].detach().reshape(-1) for n in order])
            new_chunk = flat_param[mine] - lr * buf
            gathered = [torch.empty_like(new_chunk) for _ in range(zero_size)]
            # ZeRO-1: each zero rank updated its chunk; the all-gather gives everyone all.
            dist.all_gather(gathered, new_chunk, group=zero_group)
            flat_param = torch.cat(gathered)
            offset = 0
            for name in order:
                param = named[name]
                param.copy_(flat_param[offset:offset + param.numel()].view_as(param))
                offset += param.numel()
    momentum_chunk = buf if buf is not None else torch.zeros(chunk, dtype=x.dtype)
    return ({name: param.detach().clone().contiguous() for name, param in named.items()},
            momentum_chunk.clone())

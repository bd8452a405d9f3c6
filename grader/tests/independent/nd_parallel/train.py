"""An independent `train.py`, written from the stub's docstrings and README §4–§5 only.

The residual MLP `x = x + gelu(x @ w1ᵀ + b1) @ w2ᵀ + b2` trained with SGD-momentum, tensor
parallel inside data parallel (`train_2d`) and with a ZeRO-1 axis between them (`train_3d`).
Gradients come from `torch.autograd.grad` on this replica's mean loss; the global gradient is
the mean of the replicas' (equal-sized row blocks), so summing over the data-parallel groups
and dividing by the number of replicas gives the dense update.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

# The provided tensor-parallel layers (read-only): use them for the TP model.
from assignments.nd_parallel.tp_layers import ColumnParallelLinear, RowParallelLinear

_KINDS = ("w1", "b1", "w2", "b2")


def _split_name(name: str) -> tuple[int, str]:
    """("3.w2") -> (3, "w2"); ValueError for a name the model does not have."""
    block, sep, kind = name.partition(".")
    if not sep or kind not in _KINDS or not block.isdigit():
        raise ValueError(f"unexpected parameter name {name!r}: expected '<block>.w1|b1|w2|b2'")
    return int(block), kind


def _ffn(params: dict[str, torch.Tensor]) -> int:
    """The MLP width, read from any w1."""
    for name, tensor in params.items():
        if _split_name(name)[1] == "w1":
            return int(tensor.shape[0])
    raise ValueError("params hold no w1")


def shard_params(params: dict[str, torch.Tensor], tp_rank: int, tp_size: int
                 ) -> dict[str, torch.Tensor]:
    """This TP rank's shards of the dense `params`, same keys.

    w1 and b1 keep rows [tp_rank·ffn/tp_size, (tp_rank+1)·ffn/tp_size), w2 the same columns,
    b2 whole. Pure: no communication; new contiguous tensors, `params` left unchanged.

    Raises:
        ValueError: ffn not divisible by tp_size, or tp_rank outside [0, tp_size).
    """
    if tp_size < 1 or not 0 <= tp_rank < tp_size:
        raise ValueError(f"tp_rank {tp_rank} is outside [0, {tp_size})")
    ffn = _ffn(params)
    if ffn % tp_size:
        raise ValueError(f"ffn {ffn} is not divisible by tp_size {tp_size}")
    width = ffn // tp_size
    keep = slice(tp_rank * width, (tp_rank + 1) * width)
    out: dict[str, torch.Tensor] = {}
    for name, tensor in params.items():
        kind = _split_name(name)[1]
        if kind in ("w1", "b1"):
            piece = tensor[keep]
        elif kind == "w2":
            piece = tensor[:, keep]
        else:
            piece = tensor
        out[name] = piece.detach().clone().contiguous()
    return out


class _TPReplica:
    """One rank's slice of the model: per block a column- and a row-parallel layer."""

    def __init__(self, shards: dict[str, torch.Tensor], group: dist.ProcessGroup) -> None:
        blocks = sorted({_split_name(name)[0] for name in shards})
        self.layers = []
        self.by_name: dict[str, torch.nn.Parameter] = {}
        for i in blocks:
            up = ColumnParallelLinear(shards[f"{i}.w1"], shards[f"{i}.b1"], group)
            down = RowParallelLinear(shards[f"{i}.w2"], shards[f"{i}.b2"], group)
            self.layers.append((up, down))
            self.by_name.update({f"{i}.w1": up.weight, f"{i}.b1": up.bias,
                                 f"{i}.w2": down.weight, f"{i}.b2": down.bias})

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean squared error of this replica's rows."""
        h = x
        for up, down in self.layers:
            h = h + down(F.gelu(up(h)))
        return (h - y).pow(2).mean()

    def grads(self, names: list[str], x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        """Gradients of this replica's loss for `names`, in that order."""
        loss = self.loss(x, y)
        return list(torch.autograd.grad(loss, [self.by_name[n] for n in names]))

    def snapshot(self) -> dict[str, torch.Tensor]:
        """Current shards: new, detached, contiguous."""
        return {n: p.detach().clone().contiguous() for n, p in self.by_name.items()}


def _check_batches(x: torch.Tensor, y: torch.Tensor, steps: int, replicas: int) -> int:
    """Rows per replica, after the shape checks."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if x.dim() != 3 or x.shape[0] != steps or tuple(y.shape) != tuple(x.shape):
        raise ValueError(f"x and y must both be [steps={steps}, B, hidden], got "
                         f"{tuple(x.shape)} and {tuple(y.shape)}")
    rows = int(x.shape[1])
    if rows % replicas:
        raise ValueError(f"a batch of {rows} rows does not split over {replicas} replicas")
    return rows // replicas


def train_2d(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, *, lr: float,
             momentum: float, steps: int, tp_group: dist.ProcessGroup,
             dp_group: dist.ProcessGroup) -> dict[str, torch.Tensor]:
    """Train `steps` SGD-momentum steps on a (dp, tp) mesh; this rank's final shards.

    Replica k = dist.get_rank(dp_group) of D trains on rows [k·B/D, (k+1)·B/D) of each step's
    batch with the provided TP layers on tp_group (TP rank j of T); after backward one flat
    buffer of all this rank's gradients is SUM-all-reduced on dp_group and divided by D.

    Returns:
        The shards after the last step, cut as `shard_params(final, j, T)`.

    Raises:
        ValueError: B not divisible by D or ffn not divisible by T, before any communication.
    """
    j, tp_size = dist.get_rank(tp_group), dist.get_world_size(tp_group)
    k, replicas = dist.get_rank(dp_group), dist.get_world_size(dp_group)
    per = _check_batches(x, y, steps, replicas)
    shards = shard_params(params, j, tp_size)

    model = _TPReplica(shards, tp_group)
    names = sorted(shards)
    weights = [model.by_name[n] for n in names]
    velocity: list[torch.Tensor] | None = None
    rows = slice(k * per, (k + 1) * per)
    for s in range(steps):
        grads = model.grads(names, x[s, rows], y[s, rows])
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=dp_group)
        flat = flat / replicas
        mean_grads = list(torch.split(flat, [w.numel() for w in weights]))
        with torch.no_grad():
            if velocity is None:
                velocity = [g.clone() for g in mean_grads]
            else:
                velocity = [momentum * v + g for v, g in zip(velocity, mean_grads, strict=True)]
            for w, v in zip(weights, velocity, strict=True):
                w.sub_(lr * v.view_as(w))
    final = model.snapshot()
    return {n: final[n] for n in params}


def train_3d(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, *, lr: float,
             momentum: float, steps: int, tp_group: dist.ProcessGroup,
             dp_group: dist.ProcessGroup, zero_group: dist.ProcessGroup
             ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Train on a (dp, zero, tp) mesh with ZeRO-1 over the zero axis (README §5).

    Replica k = a·Z + z (a of D on dp_group, z of Z on zero_group) trains on rows
    [k·B/(D·Z), (k+1)·B/(D·Z)). The flat gradient (this rank's shards, names sorted, each
    row-major; n elements) is reduce-scattered over zero_group, the chunk all-reduced over
    dp_group and divided by D·Z; rank z keeps the momentum of elements [z·n/Z, (z+1)·n/Z),
    updates them, and an all-gather over zero_group rebuilds the whole flat parameters.

    Returns:
        (shards after the last step, this rank's momentum chunk of n/Z elements).

    Raises:
        ValueError: B not divisible by D·Z, ffn not divisible by T, or n not divisible by Z,
        before any communication.
    """
    j, tp_size = dist.get_rank(tp_group), dist.get_world_size(tp_group)
    a, d_size = dist.get_rank(dp_group), dist.get_world_size(dp_group)
    z, z_size = dist.get_rank(zero_group), dist.get_world_size(zero_group)
    replicas = d_size * z_size
    per = _check_batches(x, y, steps, replicas)
    shards = shard_params(params, j, tp_size)
    names = sorted(shards)
    numels = [shards[n].numel() for n in names]
    total = sum(numels)
    if total % z_size:
        raise ValueError(f"{total} flat parameter elements do not split over {z_size} "
                         "zero ranks")
    chunk = total // z_size
    mine = slice(z * chunk, (z + 1) * chunk)

    model = _TPReplica(shards, tp_group)
    weights = [model.by_name[n] for n in names]
    flat_params = torch.cat([shards[n].reshape(-1) for n in names])
    buf: torch.Tensor | None = None
    k = a * z_size + z
    rows = slice(k * per, (k + 1) * per)
    for s in range(steps):
        grads = model.grads(names, x[s, rows], y[s, rows])
        flat_grad = torch.cat([g.reshape(-1) for g in grads])
        part = torch.empty(chunk, dtype=flat_grad.dtype)
        dist.reduce_scatter_tensor(part, flat_grad, op=dist.ReduceOp.SUM, group=zero_group)
        dist.all_reduce(part, op=dist.ReduceOp.SUM, group=dp_group)
        part = part / replicas
        buf = part.clone() if buf is None else momentum * buf + part
        updated = flat_params[mine] - lr * buf
        gathered = torch.empty_like(flat_params)
        dist.all_gather_into_tensor(gathered, updated.contiguous(), group=zero_group)
        flat_params = gathered
        with torch.no_grad():
            for w, piece in zip(weights, torch.split(flat_params, numels), strict=True):
                w.copy_(piece.view_as(w))
    assert buf is not None
    final = model.snapshot()
    return {n: final[n] for n in params}, buf.detach().clone().contiguous()

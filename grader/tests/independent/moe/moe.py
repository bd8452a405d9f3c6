"""An independent moe submission, written from the stub's docstrings and the README only.

Choices of its own where the contract allows: the top-k is taken on the logits (the same order
as on the probabilities, but it cannot tie where large logits underflow a probability to 0),
and the weights are a softmax over the k chosen logits; the drop order is computed with one
stable sort of the choice-major assignment list (no loop over experts); the layer exchanges
per-expert counts (E integers) and runs every local expert on its contiguous block of the rows
it received after one stable regrouping, undone by the inverse permutation.
"""

from __future__ import annotations

import math
import operator

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

# ---- small helpers ----------------------------------------------------------------------------


def _as_int(value, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{what} must be an integer, got {value!r}") from None


def _check_k(k, num_experts: int) -> int:
    k = _as_int(k, "k")
    if not 1 <= k <= num_experts:
        raise ValueError(f"k = {k} must lie in [1, E] with E = {num_experts}")
    return k


def _group_shape(group) -> tuple[int, int]:
    return dist.get_world_size(group), dist.get_rank(group)


# ---- routing and the auxiliary losses ---------------------------------------------------------


def route(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2:
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits)
        raise ValueError(f"route: logits must be 2-D [T, E], got {shape}")
    num_experts = logits.shape[1]
    k = _check_k(k, num_experts)
    probs = torch.softmax(logits, dim=-1)
    # Ranking by logit is ranking by probability (softmax is monotone) without underflow ties.
    experts = torch.topk(logits.detach(), k, dim=-1, largest=True, sorted=True).indices
    chosen = torch.gather(logits, 1, experts)
    weights = torch.softmax(chosen, dim=-1)  # = chosen probs / their sum
    return weights, experts.to(torch.int64), probs


def load_balancing_loss(probs: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    if probs.dim() != 2 or experts.dim() != 2 or experts.shape[0] != probs.shape[0]:
        raise ValueError(f"load_balancing_loss: probs [T, E] and experts [T, k] expected, got "
                         f"{tuple(probs.shape)} and {tuple(experts.shape)}")
    num_experts = probs.shape[1]
    assignments = experts.numel()
    counts = torch.bincount(experts.reshape(-1).to(torch.int64), minlength=num_experts)
    f = counts.to(probs.dtype) / assignments  # a count: no gradient
    mean_prob = probs.sum(dim=0) / probs.shape[0]
    return num_experts * torch.dot(f, mean_prob)


def router_z_loss(logits: torch.Tensor) -> torch.Tensor:
    if logits.dim() != 2:
        raise ValueError(f"router_z_loss: logits must be 2-D, got {tuple(logits.shape)}")
    lse = torch.logsumexp(logits, dim=-1)
    return (lse * lse).mean()


# ---- capacity ---------------------------------------------------------------------------------


def expert_capacity(num_tokens: int, num_experts: int, k: int,
                    capacity_factor: float) -> int:
    if capacity_factor is None or isinstance(capacity_factor, bool):
        raise ValueError(f"capacity_factor must be a positive number, got {capacity_factor!r}")
    try:
        factor = float(capacity_factor)
    except (TypeError, ValueError):
        raise ValueError(f"capacity_factor must be a positive number, "
                         f"got {capacity_factor!r}") from None
    if not factor > 0 or math.isinf(factor):
        raise ValueError(f"capacity_factor must be > 0, got {capacity_factor!r}")
    num_tokens = _as_int(num_tokens, "num_tokens")
    num_experts = _as_int(num_experts, "num_experts")
    k = _as_int(k, "k")
    if num_experts < 1:
        raise ValueError(f"num_experts = {num_experts} must be >= 1")
    if k < 1:
        raise ValueError(f"k = {k} must be >= 1")
    if num_tokens < 0:
        raise ValueError(f"num_tokens = {num_tokens} must be >= 0")
    return int(math.ceil(k * num_tokens * factor / num_experts))


def capacity_mask(experts: torch.Tensor, num_experts: int, capacity: int | None) -> torch.Tensor:
    if experts.dim() != 2:
        raise ValueError(f"capacity_mask: experts must be [T, k], got {tuple(experts.shape)}")
    if capacity is None:
        return torch.ones(experts.shape, dtype=torch.bool, device=experts.device)
    capacity = _as_int(capacity, "capacity")
    if capacity < 0:
        raise ValueError(f"capacity = {capacity} must be >= 0")
    num_tokens, k = experts.shape
    # Choice-major priority list: position p = j * T + t.
    flat = experts.t().reshape(-1).to(torch.int64)
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= num_experts):
        raise ValueError(f"capacity_mask: experts must lie in [0, {num_experts})")
    order = torch.sort(flat, stable=True).indices  # by expert, priority kept within one
    sorted_experts = flat[order]
    n = flat.numel()
    positions = torch.arange(n, device=flat.device)
    # Index in the sorted list where each expert's block starts.
    is_start = torch.ones(n, dtype=torch.bool, device=flat.device)
    if n > 1:
        is_start[1:] = sorted_experts[1:] != sorted_experts[:-1]
    block_start = torch.cummax(torch.where(is_start, positions, torch.zeros_like(positions)),
                               dim=0).values
    rank_in_expert = positions - block_start
    keep_sorted = rank_in_expert < capacity
    keep_flat = torch.empty(n, dtype=torch.bool, device=flat.device)
    keep_flat[order] = keep_sorted
    return keep_flat.reshape(k, num_tokens).t().contiguous()


# ---- the all-to-all with autograd -------------------------------------------------------------


def _exchange(x: torch.Tensor, send: list[int], recv: list[int], group) -> torch.Tensor:
    out = x.new_empty((sum(recv),) + tuple(x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), output_split_sizes=list(recv),
                           input_split_sizes=list(send), group=group)
    return out


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, send, recv, group):
        ctx.send, ctx.recv, ctx.group = send, recv, group
        return _exchange(x, send, recv, group)

    @staticmethod
    def backward(ctx, grad):
        # The rows retrace their way: receive by send splits, send by recv splits.
        return _exchange(grad, ctx.recv, ctx.send, ctx.group), None, None, None


def _splits(splits, n_ranks: int, what: str) -> list[int]:
    try:
        values = [_as_int(s, what) for s in splits]
    except TypeError:
        raise ValueError(f"{what} must be a list of {n_ranks} ints") from None
    if len(values) != n_ranks:
        raise ValueError(f"{what} has {len(values)} entries, the group has {n_ranks} ranks")
    if any(v < 0 for v in values):
        raise ValueError(f"{what} = {values} has a negative entry")
    return values


def all_to_all_tokens(x: torch.Tensor, send_splits: list[int], recv_splits: list[int],
                      group: dist.ProcessGroup | None = None) -> torch.Tensor:
    n_ranks, _ = _group_shape(group)
    send = _splits(send_splits, n_ranks, "send_splits")
    recv = _splits(recv_splits, n_ranks, "recv_splits")
    if x.dim() < 1 or sum(send) != x.shape[0]:
        raise ValueError(f"sum(send_splits) = {sum(send)} but x has "
                         f"{x.shape[0] if x.dim() else 0} rows")
    return _AllToAll.apply(x, send, recv, group)


# ---- the layer --------------------------------------------------------------------------------


class MoELayer(nn.Module):
    def __init__(self, hidden: int, ffn: int, num_experts: int, k: int = 2,
                 capacity_factor: float | None = None,
                 group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        local = self._configure(num_experts, k, capacity_factor, group)
        self.router = nn.Linear(hidden, num_experts, bias=False)
        bound_in, bound_out = 1.0 / math.sqrt(hidden), 1.0 / math.sqrt(ffn)
        self.w_gate = nn.Parameter(torch.empty(local, ffn, hidden).uniform_(-bound_in, bound_in))
        self.w_up = nn.Parameter(torch.empty(local, ffn, hidden).uniform_(-bound_in, bound_in))
        self.w_down = nn.Parameter(torch.empty(local, hidden, ffn).uniform_(-bound_out,
                                                                            bound_out))

    def _configure(self, num_experts, k, capacity_factor, group) -> int:
        num_experts = _as_int(num_experts, "num_experts")
        if num_experts < 1:
            raise ValueError(f"num_experts = {num_experts} must be >= 1")
        n_ranks, rank = _group_shape(group)
        if num_experts % n_ranks:
            raise ValueError(f"num_experts = {num_experts} is not divisible by the "
                             f"expert-parallel group size N = {n_ranks}")
        self.k = _check_k(k, num_experts)
        self.num_experts = num_experts
        self.capacity_factor = capacity_factor
        self.group = group
        self._n_ranks, self._rank = n_ranks, rank
        self._local = num_experts // n_ranks
        return self._local

    @classmethod
    def from_dense(cls, router_weight: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
                   w_down: torch.Tensor, k: int = 2, capacity_factor: float | None = None,
                   group: dist.ProcessGroup | None = None) -> MoELayer:
        if router_weight.dim() != 2:
            raise ValueError(f"router_weight must be [E, H], got {tuple(router_weight.shape)}")
        num_experts, hidden = router_weight.shape
        if w_gate.dim() != 3 or w_gate.shape[0] != num_experts or w_gate.shape[2] != hidden:
            raise ValueError(f"w_gate must be [E={num_experts}, F, H={hidden}], "
                             f"got {tuple(w_gate.shape)}")
        ffn = w_gate.shape[1]
        if tuple(w_up.shape) != (num_experts, ffn, hidden):
            raise ValueError(f"w_up must be {(num_experts, ffn, hidden)} like w_gate, "
                             f"got {tuple(w_up.shape)}")
        if tuple(w_down.shape) != (num_experts, hidden, ffn):
            raise ValueError(f"w_down must be {(num_experts, hidden, ffn)}, "
                             f"got {tuple(w_down.shape)}")
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        local = layer._configure(num_experts, k, capacity_factor, group)
        first = layer._rank * local
        router = nn.Linear(hidden, num_experts, bias=False, dtype=router_weight.dtype,
                           device=router_weight.device)
        with torch.no_grad():
            router.weight.copy_(router_weight.detach())
        layer.router = router

        def share(full: torch.Tensor) -> nn.Parameter:
            return nn.Parameter(full.detach()[first:first + local].clone().contiguous())

        layer.w_gate, layer.w_up, layer.w_down = share(w_gate), share(w_up), share(w_down)
        return layer

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.router.in_features
        if x.dim() != 2 or x.shape[1] != hidden:
            raise ValueError(f"MoELayer: x must be [T, H={hidden}], got {tuple(x.shape)}")
        num_tokens = x.shape[0]
        n_ranks, local, E = self._n_ranks, self._local, self.num_experts

        logits = self.router(x)
        weights, experts, _ = route(logits, self.k)
        capacity = (None if self.capacity_factor is None else
                    expert_capacity(num_tokens, E, self.k, self.capacity_factor))
        keep = capacity_mask(experts, E, capacity)

        # Kept (token, choice) pairs, grouped by expert (so by destination rank).
        token_of = torch.arange(num_tokens, device=x.device).unsqueeze(1).expand_as(experts)
        kept_tokens = token_of[keep]
        kept_experts = experts[keep]
        kept_weights = weights[keep]
        by_expert = torch.sort(kept_experts, stable=True).indices
        tokens_sorted = kept_tokens[by_expert]
        weights_sorted = kept_weights[by_expert]

        # Counts per expert out; counts per (source rank, local expert) in.
        per_expert = torch.bincount(kept_experts, minlength=E).to(torch.int64)
        incoming = torch.empty_like(per_expert)
        dist.all_to_all_single(incoming, per_expert, group=self.group)
        send = per_expert.view(n_ranks, local).sum(dim=1).tolist()
        incoming = incoming.view(n_ranks, local)
        recv = incoming.sum(dim=1).tolist()

        rows = all_to_all_tokens(x.index_select(0, tokens_sorted), send, recv, self.group)

        # Received rows: source-rank blocks, each ordered by local expert. Regroup by expert.
        local_id = torch.repeat_interleave(
            torch.arange(local, device=x.device).repeat(n_ranks), incoming.reshape(-1))
        regroup = torch.sort(local_id, stable=True).indices
        grouped = rows.index_select(0, regroup)
        sizes = incoming.sum(dim=0).tolist()
        outs = []
        # Every local expert runs, even on zero rows: the results then always hang on the
        # expert weights, so this rank joins the results' reverse all-to-all in backward.
        for j, block in enumerate(torch.split(grouped, sizes, dim=0)):
            gate = F.silu(block @ self.w_gate[j].t())
            up = block @ self.w_up[j].t()
            outs.append((gate * up) @ self.w_down[j].t())
        grouped_out = torch.cat(outs, dim=0)
        undo = torch.empty_like(regroup)
        undo[regroup] = torch.arange(regroup.numel(), device=x.device)
        results = grouped_out.index_select(0, undo)

        back = all_to_all_tokens(results, recv, send, self.group)
        contrib = back * weights_sorted.unsqueeze(1).to(back.dtype)
        y = torch.zeros(num_tokens, hidden, dtype=contrib.dtype, device=x.device)
        y = y.index_add(0, tokens_sorted, contrib)
        return y, logits

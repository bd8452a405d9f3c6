"""Mixture of experts with expert parallelism (reference solution).

A mixture-of-experts (MoE) FFN replaces one big MLP by E smaller ones, the experts, and a router
that sends each token to k of them (Shazeer et al. 2017; GShard, Lepikhin et al. 2020; Switch,
Fedus et al. 2021; Mixtral, Jiang et al. 2024). Parameters grow with E, the FLOPs per token only
with k. Under expert parallelism the E experts are spread over N ranks, E/N each, and tokens
travel to their experts and back with two all-to-alls (and their two reverses in backward).

All torch.distributed calls of this module sit in the first section ("communication"):
`_all_to_all_rows` is the only one that moves data, so the three forward calls and two backward
calls of a layer can be read off the code.
See assignments/moe/README.md.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

# ---- communication: the only torch.distributed calls of this module ---------------------------


def _all_to_all_rows(x: torch.Tensor, send_splits: list[int], recv_splits: list[int],
                     group: dist.ProcessGroup | None) -> torch.Tensor:
    """One uneven `all_to_all_single` of the rows of `x` (no autograd)."""
    out = x.new_empty((sum(recv_splits), *x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), output_split_sizes=list(recv_splits),
                           input_split_sizes=list(send_splits), group=group)
    return out


class _AllToAll(torch.autograd.Function):
    """Rows go out by `send_splits` and come in by `recv_splits`; the gradient goes back the
    same way reversed: what arrived from rank j returns to rank j, into the rows it came from."""

    @staticmethod
    def forward(ctx, x, send_splits, recv_splits, group):
        ctx.send_splits, ctx.recv_splits, ctx.group = send_splits, recv_splits, group
        return _all_to_all_rows(x, send_splits, recv_splits, group)

    @staticmethod
    def backward(ctx, grad):
        # The reverse all-to-all: the output's rows are now the input, so the splits swap.
        back = _all_to_all_rows(grad.contiguous(), ctx.recv_splits, ctx.send_splits, ctx.group)
        return back, None, None, None


def _exchange_counts(counts: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    """Every rank sends E/N counts to each rank (how many rows it will send to each of that
    rank's experts) and receives the same from each: [N * E/N] int64, source-rank major."""
    out = torch.empty_like(counts)
    dist.all_to_all_single(out, counts, group=group)
    return out


# ---- routing and the auxiliary losses ---------------------------------------------------------


def route(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if logits.dim() != 2:
        raise ValueError(f"route: logits must be [T, E], got shape {tuple(logits.shape)}")
    num_experts = logits.shape[1]
    if not 1 <= k <= num_experts:
        raise ValueError(f"route: k={k} must be in [1, E] with E={num_experts}")
    # Softmax over *all* experts first: these are the probabilities the load-balancing loss
    # averages (P_i), so they must see every expert, not only the chosen ones.
    probs = torch.softmax(logits, dim=-1)
    top, experts = torch.topk(probs, k, dim=-1)
    # Mixtral renormalises the k chosen probabilities so a token's weights sum to 1 (for k = 1
    # the weight is exactly 1). Switch (k = 1) keeps the raw probability instead.
    weights = top / top.sum(dim=-1, keepdim=True)
    return weights, experts, probs


def load_balancing_loss(probs: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    num_tokens, num_experts = probs.shape
    # f_i: share of the T*k assignments that went to expert i. A count: argmax/top-k has no
    # gradient, which is why the loss multiplies it by the differentiable P_i (Switch §2.2).
    counts = torch.bincount(experts.reshape(-1), minlength=num_experts).to(probs.dtype)
    f = counts / experts.numel()
    p = probs.mean(dim=0)
    # Uniform routing gives f_i = P_i = 1/E and E * E * (1/E)^2 = 1.
    return num_experts * torch.sum(f * p)


def router_z_loss(logits: torch.Tensor) -> torch.Tensor:
    # ST-MoE (Zoph et al. 2022, §3.1): penalise large router logits; logsumexp keeps it finite.
    return torch.logsumexp(logits, dim=-1).square().mean()


# ---- capacity ---------------------------------------------------------------------------------


def expert_capacity(num_tokens: int, num_experts: int, k: int,
                    capacity_factor: float) -> int:
    if capacity_factor <= 0:
        raise ValueError(f"expert_capacity: capacity_factor={capacity_factor} must be > 0")
    if num_experts < 1 or k < 1 or num_tokens < 0:
        raise ValueError(f"expert_capacity: need num_experts >= 1 (got {num_experts}), "
                         f"k >= 1 (got {k}) and num_tokens >= 0 (got {num_tokens})")
    # Ceil, not floor: a floor leaves too few slots whenever k*T/E is not a whole number.
    return math.ceil(k * num_tokens * capacity_factor / num_experts)


def capacity_mask(experts: torch.Tensor, num_experts: int, capacity: int | None) -> torch.Tensor:
    if capacity is None:
        return torch.ones(experts.shape, dtype=torch.bool)
    # Walk the assignments choice-major (all first choices, then all second choices, ...),
    # token-minor: the transpose's rows are choice columns.
    ordered = experts.t().reshape(-1)
    one_hot = F.one_hot(ordered, num_experts)
    # Position of each assignment among those that chose its expert: 0, 1, 2, ...
    position = (one_hot.cumsum(dim=0) * one_hot).sum(dim=1) - 1
    keep = position < capacity
    return keep.reshape(experts.shape[1], experts.shape[0]).t().contiguous()


# ---- the all-to-all with autograd -------------------------------------------------------------


def all_to_all_tokens(x: torch.Tensor, send_splits: list[int], recv_splits: list[int],
                      group: dist.ProcessGroup | None = None) -> torch.Tensor:
    size = dist.get_world_size(group)
    send_splits, recv_splits = [int(s) for s in send_splits], [int(s) for s in recv_splits]
    if len(send_splits) != size or len(recv_splits) != size:
        raise ValueError(f"all_to_all_tokens: {len(send_splits)} send splits and "
                         f"{len(recv_splits)} recv splits for a group of {size}")
    if sum(send_splits) != x.shape[0]:
        raise ValueError(f"all_to_all_tokens: send splits add up to {sum(send_splits)}, "
                         f"x has {x.shape[0]} rows")
    return _AllToAll.apply(x, send_splits, recv_splits, group)


# ---- the layer --------------------------------------------------------------------------------


def _check_sizes(num_experts: int, k: int, size: int) -> int:
    if num_experts % size != 0:
        raise ValueError(f"MoELayer: num_experts={num_experts} is not divisible by the "
                         f"expert-parallel size {size}")
    if not 1 <= k <= num_experts:
        raise ValueError(f"MoELayer: k={k} must be in [1, E] with E={num_experts}")
    return num_experts // size


def _uniform(shape: tuple[int, ...], fan_in: int) -> nn.Parameter:
    bound = 1.0 / math.sqrt(fan_in)
    return nn.Parameter(torch.empty(shape).uniform_(-bound, bound))


class MoELayer(nn.Module):
    def __init__(self, hidden: int, ffn: int, num_experts: int, k: int = 2,
                 capacity_factor: float | None = None,
                 group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        self.group, self.k, self.num_experts = group, k, num_experts
        self.capacity_factor = capacity_factor
        self.local = _check_sizes(num_experts, k, dist.get_world_size(group))
        self.first = dist.get_rank(group) * self.local  # global index of local expert 0
        self.router = nn.Linear(hidden, num_experts, bias=False)
        self.w_gate = _uniform((self.local, ffn, hidden), hidden)
        self.w_up = _uniform((self.local, ffn, hidden), hidden)
        self.w_down = _uniform((self.local, hidden, ffn), ffn)

    @classmethod
    def from_dense(cls, router_weight: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
                   w_down: torch.Tensor, k: int = 2, capacity_factor: float | None = None,
                   group: dist.ProcessGroup | None = None) -> MoELayer:
        num_experts, hidden = router_weight.shape
        ffn = w_gate.shape[1]
        want = {"w_gate": (num_experts, ffn, hidden), "w_up": (num_experts, ffn, hidden),
                "w_down": (num_experts, hidden, ffn)}
        for name, t in (("w_gate", w_gate), ("w_up", w_up), ("w_down", w_down)):
            if tuple(t.shape) != want[name]:
                raise ValueError(f"MoELayer.from_dense: {name} has shape {tuple(t.shape)}, "
                                 f"expected {want[name]} for router [E={num_experts}, "
                                 f"H={hidden}] and F={ffn}")
        layer = cls(hidden, ffn, num_experts, k, capacity_factor, group)
        mine = slice(layer.first, layer.first + layer.local)
        # Copies, in the dense weights' dtype: only this rank's experts are kept.
        layer.router.weight = nn.Parameter(router_weight.detach().clone())
        layer.w_gate = nn.Parameter(w_gate.detach()[mine].clone())
        layer.w_up = nn.Parameter(w_up.detach()[mine].clone())
        layer.w_down = nn.Parameter(w_down.detach()[mine].clone())
        return layer

    def _experts(self, tokens: torch.Tensor, local_expert: torch.Tensor) -> torch.Tensor:
        """SwiGLU of every received row by its local expert (an index in [0, E/N))."""
        out = tokens.new_zeros(tokens.shape)
        for j in range(self.local):
            rows = (local_expert == j).nonzero(as_tuple=True)[0]
            h = tokens[rows]
            h = F.silu(h @ self.w_gate[j].t()) * (h @ self.w_up[j].t())
            out = out.index_copy(0, rows, h @ self.w_down[j].t())
        return out

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        num_tokens = x.shape[0]
        size = dist.get_world_size(self.group)
        # 1. Route (replicated router, local tokens) and drop what exceeds capacity; each rank
        #    decides for its own tokens, so dropping needs no communication (GShard's groups).
        logits = self.router(x)
        weights, experts, _ = route(logits, self.k)
        capacity = None if self.capacity_factor is None else expert_capacity(
            num_tokens, self.num_experts, self.k, self.capacity_factor)
        keep = capacity_mask(experts, self.num_experts, capacity)

        # 2. Permute: the kept (token, choice) slots sorted by expert, hence by destination rank
        #    (experts of rank j are contiguous). A stable sort keeps token order within an expert.
        token_of = torch.arange(num_tokens).unsqueeze(1).expand_as(experts)[keep]
        expert_of = experts[keep]
        weight_of = weights[keep]
        order = torch.argsort(expert_of, stable=True)
        token_of, expert_of, weight_of = token_of[order], expert_of[order], weight_of[order]

        # 3. Exchange counts: per destination expert, so the receiver also learns which of its
        #    experts each arriving row is for (rows come source-major, expert-minor).
        counts = torch.bincount(expert_of, minlength=self.num_experts)
        recv_counts = _exchange_counts(counts, self.group).view(size, self.local)
        send_splits = counts.view(size, self.local).sum(dim=1).tolist()
        recv_splits = recv_counts.sum(dim=1).tolist()

        # 4. Dispatch: one all-to-all of the token rows.
        received = all_to_all_tokens(x[token_of], send_splits, recv_splits, self.group)

        # 5. Local experts: which expert each received row is for follows from the counts.
        local_expert = torch.repeat_interleave(
            torch.arange(self.local).repeat(size), recv_counts.reshape(-1))
        results = self._experts(received, local_expert)

        # 6. Combine: send the results back (the reverse of step 4's splits) and add them, times
        #    the router weight, into the rows of the tokens they came from.
        returned = all_to_all_tokens(results, recv_splits, send_splits, self.group)
        y = x.new_zeros(x.shape).index_add(0, token_of, returned * weight_of.unsqueeze(1))
        return y, logits

"""An independent moe submission, written from the stub's docstrings and README only.

Different from the reference where the contract allows: top-k runs on the logits and the
weights are a softmax over the k chosen logits; the drop order is a plain loop; the layer walks
its assignments choice-major (all first choices, then all second choices) instead of token by
token, groups them by destination rank with a per-rank bucket loop, exchanges per-expert counts
laid out per destination, and skips experts that receive no row (their gradients stay None).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def route(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D [T, E], got {tuple(logits.shape)}")
    e = logits.shape[-1]
    if k < 1 or k > e:
        raise ValueError(f"k={k} is outside [1, E={e}]")
    chosen_logits, experts = logits.topk(k, dim=-1, sorted=True)
    weights = chosen_logits.softmax(dim=-1)  # equals the renormalised top-k probabilities
    return weights, experts, logits.softmax(dim=-1)


def load_balancing_loss(probs: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    e = probs.shape[-1]
    one_hot = torch.zeros(experts.numel(), e, dtype=probs.dtype)
    one_hot[torch.arange(experts.numel()), experts.reshape(-1)] = 1.0
    fraction = one_hot.mean(dim=0)
    return e * (fraction * probs.mean(dim=0)).sum()


def router_z_loss(logits: torch.Tensor) -> torch.Tensor:
    z = torch.logsumexp(logits, dim=-1)
    return (z * z).mean()


def expert_capacity(num_tokens: int, num_experts: int, k: int,
                    capacity_factor: float) -> int:
    if not capacity_factor > 0 or num_experts < 1 or k < 1 or num_tokens < 0:
        raise ValueError(f"bad capacity arguments: tokens={num_tokens}, experts={num_experts}, "
                         f"k={k}, capacity_factor={capacity_factor}")
    return math.ceil(k * num_tokens * capacity_factor / num_experts)


def capacity_mask(experts: torch.Tensor, num_experts: int, capacity: int | None) -> torch.Tensor:
    tokens, k = experts.shape
    keep = torch.zeros(tokens, k, dtype=torch.bool)
    if capacity is None:
        keep[:] = True
        return keep
    used = [0] * num_experts
    for j in range(k):
        for t in range(tokens):
            e = int(experts[t, j])
            if used[e] < capacity:
                keep[t, j] = True
            used[e] += 1
    return keep


class _Exchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, send, recv, group):
        ctx.send, ctx.recv, ctx.group = send, recv, group
        out = torch.empty((sum(recv),) + tuple(x.shape[1:]), dtype=x.dtype)
        dist.all_to_all_single(out, x.contiguous(), recv, send, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        back = torch.empty((sum(ctx.send),) + tuple(grad.shape[1:]), dtype=grad.dtype)
        dist.all_to_all_single(back, grad.contiguous(), ctx.send, ctx.recv, group=ctx.group)
        return back, None, None, None


def all_to_all_tokens(x: torch.Tensor, send_splits: list[int], recv_splits: list[int],
                      group: dist.ProcessGroup | None = None) -> torch.Tensor:
    n = dist.get_world_size(group)
    if len(send_splits) != n or len(recv_splits) != n:
        raise ValueError(f"need {n} send and recv splits, got {len(send_splits)} and "
                         f"{len(recv_splits)}")
    if sum(send_splits) != x.shape[0]:
        raise ValueError(f"send splits sum to {sum(send_splits)} but x has {x.shape[0]} rows")
    return _Exchange.apply(x, [int(s) for s in send_splits], [int(s) for s in recv_splits],
                           group)


class MoELayer(nn.Module):
    def __init__(self, hidden: int, ffn: int, num_experts: int, k: int = 2,
                 capacity_factor: float | None = None,
                 group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        n = dist.get_world_size(group)
        if num_experts % n:
            raise ValueError(f"num_experts={num_experts} not divisible by {n} ranks")
        if k < 1 or k > num_experts:
            raise ValueError(f"k={k} outside [1, {num_experts}]")
        self.k, self.capacity_factor, self.num_experts, self.group = (
            k, capacity_factor, num_experts, group)
        self.per_rank = num_experts // n
        self.router = nn.Linear(hidden, num_experts, bias=False)
        a, b = 1 / math.sqrt(hidden), 1 / math.sqrt(ffn)
        self.w_gate = nn.Parameter(torch.empty(self.per_rank, ffn, hidden).uniform_(-a, a))
        self.w_up = nn.Parameter(torch.empty(self.per_rank, ffn, hidden).uniform_(-a, a))
        self.w_down = nn.Parameter(torch.empty(self.per_rank, hidden, ffn).uniform_(-b, b))

    @classmethod
    def from_dense(cls, router_weight, w_gate, w_up, w_down, k=2, capacity_factor=None,
                   group=None):
        e, h = router_weight.shape
        f = w_gate.shape[1] if w_gate.dim() == 3 else -1
        if (tuple(w_gate.shape) != (e, f, h) or tuple(w_up.shape) != (e, f, h)
                or tuple(w_down.shape) != (e, h, f)):
            raise ValueError(f"shapes disagree: router {tuple(router_weight.shape)}, w_gate "
                             f"{tuple(w_gate.shape)}, w_up {tuple(w_up.shape)}, w_down "
                             f"{tuple(w_down.shape)}")
        layer = cls(h, f, e, k, capacity_factor, group)
        lo = dist.get_rank(group) * layer.per_rank
        hi = lo + layer.per_rank
        with torch.no_grad():
            layer.router.weight = nn.Parameter(router_weight.detach().clone())
            layer.w_gate = nn.Parameter(w_gate.detach()[lo:hi].clone())
            layer.w_up = nn.Parameter(w_up.detach()[lo:hi].clone())
            layer.w_down = nn.Parameter(w_down.detach()[lo:hi].clone())
        return layer

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = dist.get_world_size(self.group)
        t, k = x.shape[0], self.k
        logits = self.router(x)
        weights, experts, _ = route(logits, k)
        cap = (None if self.capacity_factor is None else
               expert_capacity(t, self.num_experts, k, self.capacity_factor))
        keep = capacity_mask(experts, self.num_experts, cap)

        # Kept assignments, choice-major; bucketed by destination rank, then by expert.
        tok = torch.arange(t).repeat(k)
        exp = experts.t().reshape(-1)
        wts = weights.t().reshape(-1)
        kept = keep.t().reshape(-1)
        tok, exp, wts = tok[kept], exp[kept], wts[kept]
        order = []
        for e in range(self.num_experts):
            order.append((exp == e).nonzero().flatten())
        order = torch.cat(order)
        tok, exp, wts = tok[order], exp[order], wts[order]

        counts = torch.zeros(self.num_experts, dtype=torch.int64)
        for e in exp.tolist():
            counts[e] += 1
        incoming = torch.empty_like(counts)
        dist.all_to_all_single(incoming, counts, group=self.group)
        incoming = incoming.reshape(n, self.per_rank)  # [source rank, my expert]
        send = [int(c) for c in counts.reshape(n, self.per_rank).sum(1)]
        recv = [int(c) for c in incoming.sum(1)]

        rows = all_to_all_tokens(x.index_select(0, tok), send, recv, self.group)

        # Rows arrive source-major, then by my expert: find each expert's rows per source.
        # (rows * 0, not zeros_like: the results stay attached to the received rows, so
        # backward runs both reverse all-to-alls even when no row arrived here.)
        results = rows * 0
        offset = 0
        pieces = []
        for s in range(n):
            for j in range(self.per_rank):
                c = int(incoming[s, j])
                pieces.append((j, offset, c))
                offset += c
        outs = []
        for j, start, c in pieces:
            if c == 0:
                continue
            h = rows[start:start + c]
            out = (F.silu(h @ self.w_gate[j].t()) * (h @ self.w_up[j].t())) @ self.w_down[j].t()
            outs.append((start, c, out))
        if outs:
            index = torch.cat([torch.arange(s, s + c) for s, c, _ in outs])
            results = results.index_put((index,), torch.cat([o for _, _, o in outs]))

        back = all_to_all_tokens(results, recv, send, self.group)
        y = torch.zeros_like(x).index_add(0, tok, back * wts[:, None])
        return y, logits

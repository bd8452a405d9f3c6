"""An independent implementation of context_parallel/cp.py, written from the stub's docstrings
and the README only (different structure from the reference where the contract allows): an
explicit max-shifted softmax, the ring through batch_isend_irecv, Ulysses with list
all-to-alls, sequence-parallel operators through the *_tensor collectives on a transposed
copy, and the ring backward with recomputed block probabilities.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

NEG_INF = float("-inf")


def _mask(nq: int, nk: int, q0: int, k0: int, device: torch.device) -> torch.Tensor:
    """True where the query may NOT see the key."""
    qi = torch.arange(q0, q0 + nq, device=device).unsqueeze(1)
    kj = torch.arange(k0, k0 + nk, device=device).unsqueeze(0)
    return kj > qi


def _scores(q, k, causal, q_offset, k_offset):
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.size(-1))
    if causal:
        s = s.masked_fill(_mask(q.size(-2), k.size(-2), q_offset, k_offset, q.device), NEG_INF)
    return s


def attention_with_lse(q, k, v, causal=False, q_offset=0, k_offset=0):
    s = _scores(q, k, causal, q_offset, k_offset)
    row_max = s.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    e = torch.exp(s - row_max)
    total = e.sum(dim=-1, keepdim=True)
    out = torch.einsum("bhqk,bhkd->bhqd", e, v) / torch.where(total > 0, total,
                                                               torch.ones_like(total))
    lse = (torch.log(total) + row_max).squeeze(-1)
    return out, lse


def merge(out_a, lse_a, out_b, lse_b):
    top = torch.maximum(lse_a, lse_b)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    wa, wb = torch.exp(lse_a - top), torch.exp(lse_b - top)
    denom = wa + wb
    lse = torch.log(denom) + top
    safe = torch.where(denom > 0, denom, torch.ones_like(denom))
    out = (wa / safe).unsqueeze(-1) * out_a + (wb / safe).unsqueeze(-1) * out_b
    return out, lse


class _Ring:
    def __init__(self, group):
        self.group = group
        self.n = dist.get_world_size(group)
        self.r = dist.get_rank(group)

    def glob(self, j):
        if self.group is None:
            return j % self.n
        return dist.get_global_rank(self.group, j % self.n)

    def shift(self, tensors):
        """Post sends to r+1 and receives from r-1 (in the listed order); returns (bufs, reqs)."""
        bufs = [torch.empty_like(t) for t in tensors]
        ops = [dist.P2POp(dist.isend, t.contiguous(), self.glob(self.r + 1), self.group)
               for t in tensors]
        ops += [dist.P2POp(dist.irecv, b, self.glob(self.r - 1), self.group) for b in bufs]
        return bufs, dist.batch_isend_irecv(ops)


def _forward(q, k, v, group, causal):
    ring = _Ring(group)
    c = q.size(-2)
    acc_out, acc_lse = None, None
    kv = (k, v)
    for step in range(ring.n):
        reqs = []
        if step + 1 < ring.n:
            nxt, reqs = ring.shift(kv)
        src = (ring.r - step) % ring.n
        if not (causal and src > ring.r):
            o, lse = attention_with_lse(q, kv[0], kv[1], causal, ring.r * c, src * c)
            if acc_out is None:
                acc_out, acc_lse = o, lse
            else:
                acc_out, acc_lse = merge(acc_out, acc_lse, o, lse)
        for req in reqs:
            req.wait()
        if step + 1 < ring.n:
            kv = tuple(nxt)
            del nxt
    return acc_out, acc_lse


class _RingFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, group, causal):
        out, lse = _forward(q, k, v, group, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.group, ctx.causal = group, causal
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        ring = _Ring(ctx.group)
        c = q.size(-2)
        scale = 1.0 / math.sqrt(q.size(-1))
        dout = dout.contiguous()
        delta = (dout * out).sum(-1, keepdim=True)
        dq = torch.zeros_like(q)
        blk = [k, v, torch.zeros_like(k), torch.zeros_like(v)]
        for step in range(ring.n):
            src = (ring.r - step) % ring.n
            if not (ctx.causal and src > ring.r):
                s = _scores(q, blk[0], ctx.causal, ring.r * c, src * c)
                p = torch.exp(s - lse.unsqueeze(-1))
                dv = torch.einsum("bhqk,bhqd->bhkd", p, dout)
                dp = torch.einsum("bhqd,bhkd->bhqk", dout, blk[1])
                ds = p * (dp - delta)
                dq = dq + scale * torch.einsum("bhqk,bhkd->bhqd", ds, blk[0])
                blk[2] = blk[2] + scale * torch.einsum("bhqk,bhqd->bhkd", ds, q)
                blk[3] = blk[3] + dv
            # Everything moves one hop; after N hops the accumulators are home.
            moving = blk if step + 1 < ring.n else blk[2:]
            bufs, reqs = ring.shift(moving)
            for req in reqs:
                req.wait()
            blk = bufs if step + 1 < ring.n else blk[:2] + bufs
        return dq, blk[2], blk[3], None, None


def ring_attention(q, k, v, group=None, causal=False):
    return _RingFn.apply(q, k, v, group, causal)


def zigzag_split(seq_len, world_size):
    if world_size < 1 or seq_len % (2 * world_size):
        raise ValueError("zigzag_split: seq_len must be a multiple of 2*world_size")
    pieces = list(torch.arange(seq_len, dtype=torch.int64).split(seq_len // (2 * world_size)))
    return [torch.cat((pieces[r], pieces[-1 - r])) for r in range(world_size)]


def zigzag_unsplit(shards, dim=0):
    n = len(shards)
    total = sum(s.size(dim) for s in shards)
    positions = zigzag_split(total, n)
    order = torch.argsort(torch.cat(positions))
    return torch.cat(list(shards), dim=dim).index_select(dim, order)


def _a2a(send: list[torch.Tensor], group) -> list[torch.Tensor]:
    recv = [torch.empty_like(t) for t in send]
    dist.all_to_all(recv, [t.contiguous() for t in send], group=group)
    return recv


def ulysses_attention(q, k, v, group=None, causal=False):
    n = dist.get_world_size(group)
    if q.size(1) % n:
        raise ValueError(f"ulysses_attention: {q.size(1)} heads not divisible by {n}")

    def seq_to_heads(t):
        return torch.cat(_a2a(list(t.tensor_split(n, dim=1)), group), dim=2)

    o, _ = attention_with_lse(seq_to_heads(q), seq_to_heads(k), seq_to_heads(v), causal)
    return torch.cat(_a2a(list(o.tensor_split(n, dim=2)), group), dim=1)


def _gather(x, group):
    n = dist.get_world_size(group)
    xt = x.transpose(0, 1).contiguous()  # [s, b, h]: the sequence first
    out = xt.new_empty((n * xt.size(0),) + tuple(xt.shape[1:]))
    dist.all_gather_into_tensor(out, xt, group=group)
    return out.transpose(0, 1).contiguous()


def _scatter(x, group):
    n = dist.get_world_size(group)
    if x.size(1) % n:
        raise ValueError("sequence not divisible by the group size")
    xt = x.transpose(0, 1).contiguous()
    out = xt.new_empty((xt.size(0) // n,) + tuple(xt.shape[1:]))
    dist.reduce_scatter_tensor(out, xt, group=group)
    return out.transpose(0, 1).contiguous()


class _G(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _gather(x, group)

    @staticmethod
    def backward(ctx, g):
        return _scatter(g, ctx.group), None


class _GBar(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _scatter(x, group)

    @staticmethod
    def backward(ctx, g):
        return _gather(g, ctx.group), None


def gather_from_sequence_parallel_region(x, group=None):
    return _G.apply(x, group)


def reduce_scatter_to_sequence_parallel_region(x, group=None):
    if x.size(1) % dist.get_world_size(group):
        raise ValueError("sequence not divisible by the group size")
    return _GBar.apply(x, group)


def sp_mlp_block(x, ln_weight, ln_bias, w1, b1, w2, b2, group=None):
    y = F.layer_norm(x, (x.size(-1),), ln_weight, ln_bias, 1e-5)
    y = gather_from_sequence_parallel_region(y, group)
    y = F.linear(F.gelu(F.linear(y, w1, b1)), w2)
    return x + reduce_scatter_to_sequence_parallel_region(y, group) + b2

"""Context parallelism: an independent implementation written from the contract (cp.py stub).

Ring attention (forward and backward), zigzag sharding, Ulysses and Megatron sequence
parallelism. Layouts: attention `[batch, heads, seq, dim]`, MLP block `[batch, seq, hidden]`.
"""

from __future__ import annotations

import math
import operator

import torch
import torch.distributed as dist
import torch.nn.functional as F

_NEG_INF = float("-inf")


# ---- small helpers ------------------------------------------------------------------------------

def _group_info(group: dist.ProcessGroup | None) -> tuple[int, int]:
    """(N, r) of `group`."""
    return dist.get_world_size(group), dist.get_rank(group)


def _global(group: dist.ProcessGroup | None, group_rank: int) -> int:
    """Global rank of `group_rank` in `group` (identity for the default group)."""
    if group is None or group is dist.group.WORLD:
        return group_rank
    return dist.get_global_rank(group, group_rank)


def _finite_or_zero(t: torch.Tensor) -> torch.Tensor:
    """`t` with its -inf entries replaced by 0 (so that subtracting it never makes nan)."""
    return torch.where(torch.isneginf(t), torch.zeros_like(t), t)


def _causal_mask(n_q: int, n_k: int, q_offset: int, k_offset: int,
                 device: torch.device) -> torch.Tensor:
    """True where key (k_offset + j) lies in the future of query (q_offset + i)."""
    qpos = torch.arange(q_offset, q_offset + n_q, device=device)
    kpos = torch.arange(k_offset, k_offset + n_k, device=device)
    return kpos.unsqueeze(0) > qpos.unsqueeze(1)


def _scores(q: torch.Tensor, k: torch.Tensor, causal: bool, q_offset: int,
            k_offset: int) -> torch.Tensor:
    s = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        hidden = _causal_mask(q.shape[-2], k.shape[-2], q_offset, k_offset, q.device)
        if bool(hidden.any()):
            s = s.masked_fill(hidden, _NEG_INF)
    return s


# ---- one block of attention and the exact merge (README §3) -------------------------------------


def attention_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                       q_offset: int = 0, k_offset: int = 0
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of `q` over one block of keys, with each row's log-sum-exp.

    Max-shifted (FlashAttention style): p = exp(s - rowmax), out = (p @ v) / rowsum(p),
    lse = rowmax + log(rowsum(p)). A row that sees no key gets zeros and -inf.
    """
    s = _scores(q, k, causal, q_offset, k_offset)
    row_max = _finite_or_zero(s.amax(dim=-1))              # 0 where the row is all -inf
    p = torch.exp(s - row_max.unsqueeze(-1))               # masked entries -> exactly 0
    denom = p.sum(dim=-1)
    safe = torch.where(denom > 0, denom, torch.ones_like(denom))
    out = torch.matmul(p, v.to(p.dtype)) / safe.unsqueeze(-1)
    lse = row_max + torch.log(denom)                       # log(0) = -inf for empty rows
    return out.to(q.dtype), lse.to(q.dtype)


def merge(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Combine two partial attentions of the same queries over disjoint key sets."""
    top = _finite_or_zero(torch.maximum(lse_a, lse_b))
    wa = torch.exp(lse_a - top)                             # in [0, 1]; 0 for an empty side
    wb = torch.exp(lse_b - top)
    total = wa + wb
    lse = top + torch.log(total)
    norm = torch.where(total > 0, total, torch.ones_like(total))
    part_a = torch.where((wa > 0).unsqueeze(-1), (wa / norm).unsqueeze(-1) * out_a,
                         torch.zeros_like(out_a))
    part_b = torch.where((wb > 0).unsqueeze(-1), (wb / norm).unsqueeze(-1) * out_b,
                         torch.zeros_like(out_b))
    return part_a + part_b, lse


# ---- ring attention (README §4, §7) --------------------------------------------------------------


def _post_exchange(tensors: list[torch.Tensor], dst: int, src: int,
                   group: dist.ProcessGroup | None) -> tuple[list, list[torch.Tensor]]:
    """Post sends of `tensors` (in order) to `dst` and receives of as many from `src`."""
    handles = [dist.isend(t, dst, group=group) for t in tensors]
    incoming = [torch.empty_like(t) for t in tensors]
    handles += [dist.irecv(t, src, group=group) for t in incoming]
    return handles, incoming


def _finish(handles: list) -> None:
    for h in handles:
        h.wait()


def _ring_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  group: dist.ProcessGroup | None, causal: bool
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    n, r = _group_info(group)
    chunk = q.shape[-2]
    q_off = r * chunk
    nxt, prv = _global(group, (r + 1) % n), _global(group, (r - 1) % n)

    blk_k, blk_v = k.contiguous(), v.contiguous()
    out = lse = None
    for step in range(n):
        owner = (r - step) % n
        handles: list = []
        incoming: list[torch.Tensor] = []
        if step < n - 1:                                   # transfer of the next block first
            handles, incoming = _post_exchange([blk_k, blk_v], nxt, prv, group)
        if not (causal and owner > r):                     # later blocks: entirely masked
            o, s = attention_with_lse(q, blk_k, blk_v, causal, q_off, owner * chunk)
            if out is None:
                out, lse = o, s
            else:
                out, lse = merge(out, lse, o, s)
            del o, s
        _finish(handles)
        del handles
        if incoming:
            blk_k, blk_v = incoming                        # drop the block just used
        del incoming
    return out, lse


def _ring_backward(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   out: torch.Tensor, lse: torch.Tensor, group: dist.ProcessGroup | None,
                   causal: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n, r = _group_info(group)
    chunk = q.shape[-2]
    q_off = r * chunk
    scale = 1.0 / math.sqrt(q.shape[-1])
    nxt, prv = _global(group, (r + 1) % n), _global(group, (r - 1) % n)

    d_out = grad_out.contiguous().to(q.dtype)
    delta = (d_out * out).sum(dim=-1, keepdim=True)       # rowsum(dO ∘ O)
    lse_safe = _finite_or_zero(lse).unsqueeze(-1)
    dq = torch.zeros_like(q)

    blk_k, blk_v = k.contiguous(), v.contiguous()
    acc_k, acc_v = torch.zeros_like(blk_k), torch.zeros_like(blk_v)
    for step in range(n):
        owner = (r - step) % n
        kv_handles: list = []
        kv_in: list[torch.Tensor] = []
        if step < n - 1:
            kv_handles, kv_in = _post_exchange([blk_k, blk_v], nxt, prv, group)
        if not (causal and owner > r):
            s = _scores(q, blk_k, causal, q_off, owner * chunk)
            p = torch.exp(s - lse_safe)
            acc_v = acc_v + torch.matmul(p.transpose(-2, -1), d_out)
            dp = torch.matmul(d_out, blk_v.transpose(-2, -1))
            ds = p * (dp - delta)
            dq = dq + torch.matmul(ds, blk_k) * scale
            acc_k = acc_k + torch.matmul(ds.transpose(-2, -1), q) * scale
            del s, p, dp, ds
        # The accumulators travel with their block; after the last step one more hop home.
        if n > 1:
            acc_handles, acc_in = _post_exchange([acc_k.contiguous(), acc_v.contiguous()],
                                                 nxt, prv, group)
            _finish(kv_handles)
            _finish(acc_handles)
            acc_k, acc_v = acc_in
        if kv_in:
            blk_k, blk_v = kv_in
    return dq, acc_k, acc_v


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, group, causal):  # type: ignore[override]
        out, lse = _ring_forward(q, k, v, group, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.group, ctx.causal = group, causal
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _ring_backward(grad_out, q, k, v, out, lse, ctx.group, ctx.causal)
        return dq, dk, dv, None, None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   group: dist.ProcessGroup | None = None, causal: bool = False) -> torch.Tensor:
    """This rank's rows of full attention over the whole sequence, K/V travelling a ring."""
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _RingAttention.apply(q, k, v, group, causal)
    return _ring_forward(q, k, v, group, causal)[0]


# ---- zigzag split (README §5) ----------------------------------------------------------------


def _check_zigzag(seq_len: int, world_size: int) -> int:
    try:
        seq_len, world_size = operator.index(seq_len), operator.index(world_size)
    except TypeError as exc:
        raise ValueError(f"sizes must be integers: {seq_len!r}, {world_size!r}") from exc
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if seq_len < 0 or seq_len % (2 * world_size):
        raise ValueError(f"seq_len {seq_len} is not a multiple of 2 * world_size "
                         f"= {2 * world_size}")
    return seq_len // (2 * world_size)


def zigzag_split(seq_len: int, world_size: int) -> list[torch.Tensor]:
    """The global positions each rank holds: chunk r then chunk 2N-1-r of 2N chunks."""
    c = _check_zigzag(seq_len, world_size)
    chunks = torch.arange(seq_len, dtype=torch.int64).view(2 * world_size, c)
    return [torch.cat([chunks[r], chunks[2 * world_size - 1 - r]]) for r in range(world_size)]


def zigzag_unsplit(shards: list[torch.Tensor], dim: int = 0) -> torch.Tensor:
    """Put zigzag shards back in sequence order along `dim`."""
    n = len(shards)
    if n == 0:
        raise ValueError("zigzag_unsplit needs at least one shard")
    halves = [s.chunk(2, dim=dim) if s.shape[dim] else (s, s) for s in shards]
    early = [h[0] for h in halves]                         # chunks 0 .. N-1
    late = [halves[n - 1 - i][1] for i in range(n)]        # chunks N .. 2N-1
    return torch.cat(early + late, dim=dim)


# ---- Ulysses (README §6) ---------------------------------------------------------------------


def _seq_to_heads(x: torch.Tensor, n: int, group: dist.ProcessGroup | None) -> torch.Tensor:
    """[B, H, c, D] sequence shard -> [B, H/N, N*c, D] head shard (one all_to_all_single)."""
    b, h, c, d = x.shape
    send = x.reshape(b, n, h // n, c, d).permute(1, 0, 2, 3, 4).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    # recv[j] = rank j's sequence shard of my heads; concatenate along the sequence.
    return recv.permute(1, 2, 0, 3, 4).reshape(b, h // n, n * c, d)


def _heads_to_seq(y: torch.Tensor, n: int, group: dist.ProcessGroup | None) -> torch.Tensor:
    """[B, H/N, N*c, D] head shard -> [B, H, c, D] sequence shard (one all_to_all_single)."""
    b, hn, s, d = y.shape
    c = s // n
    send = y.reshape(b, hn, n, c, d).permute(2, 0, 1, 3, 4).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    # recv[j] = my sequence rows of rank j's heads; heads of rank j come j-th.
    return recv.permute(1, 0, 2, 3, 4).reshape(b, n * hn, c, d)


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      group: dist.ProcessGroup | None = None, causal: bool = False
                      ) -> torch.Tensor:
    """DeepSpeed-Ulysses: all-to-all sequence shards into head shards, attend, and back."""
    n, _ = _group_info(group)
    heads = q.shape[1]
    if heads % n or k.shape[1] % n or v.shape[1] % n:
        raise ValueError(f"ulysses_attention: heads ({heads}) not divisible by the group "
                         f"size {n}")
    if n == 1:
        return attention_with_lse(q, k, v, causal)[0]
    qh, kh, vh = (_seq_to_heads(t, n, group) for t in (q, k, v))
    out_h = attention_with_lse(qh, kh, vh, causal)[0]
    return _heads_to_seq(out_h, n, group)


# ---- Megatron sequence parallelism (README §8) -----------------------------------------------


def _all_gather_seq(x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    n, _ = _group_info(group)
    src = x.contiguous()
    parts = [torch.empty_like(src) for _ in range(n)]
    dist.all_gather(parts, src, group=group)
    return torch.cat(parts, dim=1)


def _reduce_scatter_seq(x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    n, _ = _group_info(group)
    pieces = [p.contiguous() for p in x.chunk(n, dim=1)]
    result = torch.empty_like(pieces[0])
    dist.reduce_scatter(result, pieces, op=dist.ReduceOp.SUM, group=group)
    return result


def _check_divisible(x: torch.Tensor, group: dist.ProcessGroup | None) -> None:
    n, _ = _group_info(group)
    if x.dim() < 2 or x.shape[1] % n:
        raise ValueError(f"sequence length {x.shape[1] if x.dim() > 1 else None} is not "
                         f"divisible by the group size {n}")


class _GatherSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):  # type: ignore[override]
        ctx.group = group
        return _all_gather_seq(x, group)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return _reduce_scatter_seq(grad, ctx.group), None


class _ScatterSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):  # type: ignore[override]
        ctx.group = group
        return _reduce_scatter_seq(x, group)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return _all_gather_seq(grad, ctx.group), None


def gather_from_sequence_parallel_region(x: torch.Tensor,
                                         group: dist.ProcessGroup | None = None
                                         ) -> torch.Tensor:
    """All-gather along the sequence forward, reduce-scatter backward."""
    return _GatherSeq.apply(x, group)


def reduce_scatter_to_sequence_parallel_region(x: torch.Tensor,
                                               group: dist.ProcessGroup | None = None
                                               ) -> torch.Tensor:
    """Reduce-scatter along the sequence forward, all-gather backward."""
    _check_divisible(x, group)
    return _ScatterSeq.apply(x, group)


def sp_mlp_block(x: torch.Tensor, ln_weight: torch.Tensor, ln_bias: torch.Tensor,
                 w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor,
                 group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Megatron-SP MLP half of a layer: LN on the shard, gather, W1/gelu/W2, reduce-scatter."""
    normed = F.layer_norm(x, (x.shape[-1],), ln_weight, ln_bias, eps=1e-5)
    full = gather_from_sequence_parallel_region(normed, group)
    hidden = F.gelu(F.linear(full, w1, b1))
    partial = F.linear(hidden, w2)
    mine = reduce_scatter_to_sequence_parallel_region(partial, group)
    return x + mine + b2

"""Context parallelism, worked: blockwise attention with its log-sum-exp, the exact merge, ring
attention (forward, and a ring backward), the zigzag split, Ulysses, and Megatron's
sequence-parallel operators.

Layout everywhere: attention tensors are [batch, heads, seq, dim]; activations of the
sequence-parallel block are [batch, seq, hidden]. Every torch.distributed call of this module
sits in the small helpers under "communication" so a reader can count them against the README's
cost model.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

# ---- communication (every dist.* call of the module) ------------------------------------------


def _group_size_rank(group: dist.ProcessGroup | None) -> tuple[int, int]:
    return dist.get_world_size(group), dist.get_rank(group)


def _global(group: dist.ProcessGroup | None, group_rank: int) -> int:
    """isend/irecv take global ranks; a ring lives in group ranks."""
    return group_rank if group is None else dist.get_global_rank(group, group_rank)


def _post_ring_exchange(tensors: list[torch.Tensor], group: dist.ProcessGroup | None
                        ) -> tuple[list[torch.Tensor], list[dist.Work]]:
    """Send each tensor to the next rank and receive as many from the previous one, all
    asynchronous, in the same order on both sides (K then V, ...). Returns the receive buffers
    (not filled until the works are waited) and the works."""
    size, rank = _group_size_rank(group)
    nxt, prv = _global(group, (rank + 1) % size), _global(group, (rank - 1) % size)
    received = [torch.empty_like(t) for t in tensors]
    works = [dist.isend(t.contiguous(), nxt, group=group) for t in tensors]
    works += [dist.irecv(buf, prv, group=group) for buf in received]
    return received, [w for w in works if w is not None]


def _wait(works: list[dist.Work]) -> None:
    for work in works:
        work.wait()


def _all_to_all(chunks: list[torch.Tensor], group: dist.ProcessGroup | None
                ) -> list[torch.Tensor]:
    """chunks[j] goes to group rank j; returns what each group rank sent here, in rank order."""
    size = len(chunks)
    send = torch.cat([c.contiguous().reshape(-1) for c in chunks])
    recv = torch.empty_like(send)  # every chunk has the same shape here
    dist.all_to_all_single(recv, send, group=group)
    return [piece.reshape(chunks[0].shape) for piece in recv.chunk(size)]


def _all_gather_seq(x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    size, _ = _group_size_rank(group)
    parts = [torch.empty_like(x) for _ in range(size)]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=1)


def _reduce_scatter_seq(x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    size, _ = _group_size_rank(group)
    parts = [p.contiguous() for p in x.chunk(size, dim=1)]
    out = torch.empty_like(parts[0])
    dist.reduce_scatter(out, parts, group=group)
    return out


# ---- one block of attention, and the exact merge (README §3) ----------------------------------


def attention_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                       q_offset: int = 0, k_offset: int = 0
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of `q` over one block of keys, and each query row's log-sum-exp.

    The contract is in assignments/context_parallel/cp.py."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-1, -2)) * scale
    if causal:
        # The mask compares *global* positions: a shard's row i is token q_offset + i.
        q_pos = torch.arange(q.shape[-2], device=q.device) + q_offset
        k_pos = torch.arange(k.shape[-2], device=q.device) + k_offset
        scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    # A row that sees no key has lse = -inf; exp(score - lse) would be nan: use 0 weights.
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    weights = torch.exp(scores - safe.unsqueeze(-1))
    return weights @ v, lse


def merge(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Combine two partial attentions over disjoint key sets into the attention over both.

    The contract is in assignments/context_parallel/cp.py."""
    # Each partial out is a softmax-weighted mean with its own normaliser exp(lse); the merged
    # normaliser is their sum, and each part is reweighted by its share of it (the online
    # softmax of Milakov & Gimelshein, 2018; Flash-Attention's rescaling).
    lse = torch.logaddexp(lse_a, lse_b)
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    w_a = torch.exp(lse_a - safe).unsqueeze(-1)
    w_b = torch.exp(lse_b - safe).unsqueeze(-1)
    return w_a * out_a + w_b * out_b, lse


# ---- ring attention (README §4; backward §7, stretch) -----------------------------------------


def _block_is_masked(causal: bool, q_offset: int, k_offset: int) -> bool:
    """With contiguous shards of equal length, a later shard's keys are all in the future."""
    return causal and k_offset > q_offset


def _ring_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  group: dist.ProcessGroup | None, causal: bool
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    size, rank = _group_size_rank(group)
    rows = q.shape[-2]
    out = q.new_zeros(*q.shape[:-1], v.shape[-1])
    lse = q.new_full(q.shape[:-1], float("-inf"))
    cur_k, cur_v = k, v
    for step in range(size):
        # Post the exchange of the next block *before* computing this one: the transfer then
        # runs while we compute (Liu et al., 2023, Ring Attention, §3).
        works: list[dist.Work] = []
        if step < size - 1:
            (next_k, next_v), works = _post_ring_exchange([cur_k, cur_v], group)
        owner = (rank - step) % size
        try:
            if not _block_is_masked(causal, rank * rows, owner * rows):
                blk_out, blk_lse = attention_with_lse(q, cur_k, cur_v, causal, rank * rows,
                                                      owner * rows)
                out, lse = merge(out, lse, blk_out, blk_lse)
        finally:
            # Never leave a transfer in flight, even when the compute raised: every rank
            # posted its half of it, and a group torn down with it pending can hang.
            _wait(works)
        if step < size - 1:
            # Dropping the old block here keeps at most two K/V blocks alive.
            cur_k, cur_v = next_k, next_v
    return out, lse


def _block_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                    lse: torch.Tensor, grad_out: torch.Tensor, causal: bool, q_offset: int,
                    k_offset: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of one block from the *final* out and lse (Flash-Attention 2's backward):
    P = exp(S - lse) is this block's share of the full softmax."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-1, -2)) * scale
    if causal:
        q_pos = torch.arange(q.shape[-2], device=q.device) + q_offset
        k_pos = torch.arange(k.shape[-2], device=q.device) + k_offset
        scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    probs = torch.exp(scores - safe.unsqueeze(-1))
    grad_v = probs.transpose(-1, -2) @ grad_out
    grad_p = grad_out @ v.transpose(-1, -2)
    delta = (grad_out * out).sum(-1, keepdim=True)
    grad_s = probs * (grad_p - delta) * scale
    return grad_s @ k, grad_s.transpose(-1, -2) @ q, grad_v


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
        group, causal = ctx.group, ctx.causal
        size, rank = _group_size_rank(group)
        rows = q.shape[-2]
        grad_out = grad_out.contiguous()
        grad_q = torch.zeros_like(q)
        # K/V travel the ring again, and with them the gradient accumulators of their owner:
        # every rank adds its queries' share, and one last hop brings them home.
        cur_k, cur_v = k, v
        grad_k, grad_v = torch.zeros_like(k), torch.zeros_like(v)
        for step in range(size):
            owner = (rank - step) % size
            works: list[dist.Work] = []
            if step < size - 1:
                (next_k, next_v), works = _post_ring_exchange([cur_k, cur_v], group)
            try:
                if not _block_is_masked(causal, rank * rows, owner * rows):
                    dq, dk, dv = _block_backward(q, cur_k, cur_v, out, lse, grad_out, causal,
                                                 rank * rows, owner * rows)
                    grad_q += dq
                    grad_k = grad_k + dk
                    grad_v = grad_v + dv
            except BaseException:
                _wait(works)
                raise
            # The accumulators follow their block: send them on to the next rank.
            (grad_k, grad_v), grad_works = _post_ring_exchange([grad_k, grad_v], group)
            _wait(works + grad_works)
            if step < size - 1:
                cur_k, cur_v = next_k, next_v
        return grad_q, grad_k, grad_v, None, None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   group: dist.ProcessGroup | None = None, causal: bool = False) -> torch.Tensor:
    """This rank's rows of full attention, K/V rotating around the ring.

    The contract is in assignments/context_parallel/cp.py."""
    return _RingAttention.apply(q, k, v, group, causal)


# ---- zigzag split (README §5) -----------------------------------------------------------------


def zigzag_split(seq_len: int, world_size: int) -> list[torch.Tensor]:
    """Positions each rank holds under the zigzag split.

    The contract is in assignments/context_parallel/cp.py."""
    if world_size < 1 or seq_len % (2 * world_size) != 0:
        raise ValueError(f"zigzag_split: seq_len {seq_len} must be a multiple of "
                         f"2 * world_size = {2 * world_size}")
    chunk = seq_len // (2 * world_size)
    # Pair an early (cheap, little to attend to) chunk with its mirror late (expensive) one.
    return [torch.cat([torch.arange(r * chunk, (r + 1) * chunk),
                       torch.arange((2 * world_size - 1 - r) * chunk,
                                    (2 * world_size - r) * chunk)])
            for r in range(world_size)]


def zigzag_unsplit(shards: list[torch.Tensor], dim: int = 0) -> torch.Tensor:
    """Put the zigzag shards back in sequence order.

    The contract is in assignments/context_parallel/cp.py."""
    world_size = len(shards)
    halves = [h for s in shards for h in s.chunk(2, dim=dim)]
    # halves[2r] is chunk r, halves[2r + 1] is chunk 2N-1-r.
    order = [0] * (2 * world_size)
    for r in range(world_size):
        order[r] = 2 * r
        order[2 * world_size - 1 - r] = 2 * r + 1
    return torch.cat([halves[i] for i in order], dim=dim)


# ---- Ulysses (README §6) ----------------------------------------------------------------------


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      group: dist.ProcessGroup | None = None, causal: bool = False
                      ) -> torch.Tensor:
    """Sequence shards -> head shards, full attention on local heads, and back.

    The contract is in assignments/context_parallel/cp.py."""
    size, _ = _group_size_rank(group)
    heads = q.shape[1]
    if heads % size != 0:
        raise ValueError(f"ulysses_attention: {heads} heads do not split over {size} ranks; "
                         f"Ulysses needs heads divisible by the group size")

    # All-to-all: head group j goes to rank j; from every rank comes its sequence shard of
    # our heads, so concatenating in rank order along seq gives the full sequence
    # (Jacobs et al., 2023, DeepSpeed-Ulysses, §3).
    def to_heads(t: torch.Tensor) -> torch.Tensor:
        return torch.cat(_all_to_all(list(t.chunk(size, dim=1)), group), dim=2)

    q_h, k_h, v_h = to_heads(q), to_heads(k), to_heads(v)
    out_h, _ = attention_with_lse(q_h, k_h, v_h, causal)
    # And back: sequence chunk j of our heads goes to rank j.
    return torch.cat(_all_to_all(list(out_h.chunk(size, dim=2)), group), dim=1)


# ---- Megatron sequence parallelism (README §8) ------------------------------------------------


class _GatherSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):  # type: ignore[override]
        ctx.group = group
        return _all_gather_seq(x, group)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        # Each rank's copy of the gathered activation fed its own tensor-parallel branch: the
        # rows of x get the sum of those gradients, which is a reduce-scatter.
        return _reduce_scatter_seq(grad, ctx.group), None


class _ReduceScatterSeq(torch.autograd.Function):
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
    """All-gather along the sequence forward, reduce-scatter backward.

    The contract is in assignments/context_parallel/cp.py."""
    return _GatherSeq.apply(x, group)


def reduce_scatter_to_sequence_parallel_region(x: torch.Tensor,
                                               group: dist.ProcessGroup | None = None
                                               ) -> torch.Tensor:
    """Reduce-scatter along the sequence forward, all-gather backward.

    The contract is in assignments/context_parallel/cp.py."""
    size, _ = _group_size_rank(group)
    if x.shape[1] % size != 0:
        raise ValueError(f"reduce_scatter_to_sequence_parallel_region: seq {x.shape[1]} is "
                         f"not divisible by the group size {size}")
    return _ReduceScatterSeq.apply(x, group)


def sp_mlp_block(x: torch.Tensor, ln_weight: torch.Tensor, ln_bias: torch.Tensor,
                 w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor,
                 group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """x + MLP(LayerNorm(x)) on this rank's sequence rows, tensor- and sequence-parallel.

    The contract is in assignments/context_parallel/cp.py."""
    # LayerNorm works row by row: it runs on the sequence shard, no communication.
    h = F.layer_norm(x, x.shape[-1:], ln_weight, ln_bias, eps=1e-5)
    # Enter the tensor-parallel region: every rank needs every row (all-gather, not f).
    h = gather_from_sequence_parallel_region(h, group)
    h = F.gelu(h @ w1.t() + b1)           # column-parallel: this rank's ffn slice
    h = h @ w2.t()                        # row-parallel: a partial sum over ffn slices
    # Leave it: sum the partial sums and keep our rows (reduce-scatter, not g).
    h = reduce_scatter_to_sequence_parallel_region(h, group)
    # The bias is added once, after the sum; the residual is on our rows already.
    return x + h + b2

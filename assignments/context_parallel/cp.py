"""Context parallelism: the module you write.

Read assignments/context_parallel/README.md first. Conventions used by every function below:

- Attention tensors are `[batch, heads, seq, dim]` (q and k share `dim`; v may have another,
  `dim_v`). Activations of the sequence-parallel block are `[batch, seq, hidden]`.
- The softmax scale is `1 / sqrt(dim)` (dim of q and k), always.
- `group` is the context-parallel process group (None: the default group). N is its size,
  `dist.get_world_size(group)`, and r this rank's position in it, `dist.get_rank(group)`.
  `dist.isend`/`dist.irecv` take *global* ranks: translate with `dist.get_global_rank`.
- Contiguous sequence sharding: with a full sequence of S tokens, rank r holds the S/N tokens
  at positions [r*S/N, (r+1)*S/N). Every rank's shard has the same shape.
- Functions return new tensors and never modify their inputs in place. Dtypes: any floating
  dtype (the tests use float64 and float32); outputs keep the input dtype.
- Tensors are CPU tensors under gloo, CUDA ones under NCCL.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

# ---- one block of attention and the exact merge (README §3) -----------------------------------


def attention_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                       q_offset: int = 0, k_offset: int = 0
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of `q` over one block of keys, with each query row's log-sum-exp.

    Args:
        q: [batch, heads, seq_q, dim].
        k: [batch, heads, seq_k, dim].
        v: [batch, heads, seq_k, dim_v].
        causal: mask in *global* positions: query row i is the token at position
            `q_offset + i`, key row j the token at `k_offset + j`, and the query sees the key
            iff `k_offset + j <= q_offset + i`. Without `causal` every query sees every key
            and the offsets are ignored.
        q_offset, k_offset: global position of row 0 of q and of k.

    Returns:
        `(out, lse)`: out [batch, heads, seq_q, dim_v] = softmax(scores) @ v over the keys the
        row sees, with scores = q @ kᵀ / sqrt(dim); lse [batch, heads, seq_q], the natural
        log of the sum of exp(scores) over those keys (log space, not the sum itself). A row
        that sees no key gets an out row of zeros and lse = -inf (never nan). Both in q's dtype.
    """
    raise NotImplementedError("attention_with_lse: see README §3")


def merge(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Combine two partial attentions of the same queries over disjoint sets of keys.

    Args:
        out_a, out_b: [..., seq, dim_v], the attention of each query row over key sets A and B
            (as `attention_with_lse` returns them).
        lse_a, lse_b: [..., seq], their log-sum-exps.

    Returns:
        `(out, lse)`, new tensors: the attention over A ∪ B and its log-sum-exp,
        `lse = log(exp(lse_a) + exp(lse_b))` and
        `out = (exp(lse_a) * out_a + exp(lse_b) * out_b) / exp(lse)` (row-wise), computed
        without overflow (never exponentiate an lse itself). A side with lse = -inf (it saw
        no key) contributes nothing; both -inf gives out 0 and lse -inf, never nan. Exact: up
        to rounding, merging is commutative and associative, and merging the blocks of a key
        set in any grouping gives attention over the whole set.
    """
    raise NotImplementedError("merge: see README §3")


# ---- ring attention (README §4; its backward, §7, is the stretch part) ------------------------


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   group: dist.ProcessGroup | None = None, causal: bool = False) -> torch.Tensor:
    """This rank's rows of full attention over the whole sequence, K/V travelling a ring.

    Args:
        q, k: [batch, heads, S/N, dim], this rank's contiguous sequence shard (positions
            [r*S/N, (r+1)*S/N)).
        v: [batch, heads, S/N, dim_v].
        causal: causal attention in global positions.

    Returns:
        [batch, heads, S/N, dim_v]: rows r*S/N ... of attention of the full q over the full
        k, v (what `attention_with_lse` on the gathered tensors would give).

    Communication (forward): N-1 steps; in each, the rank sends the K block it holds and then
    the V block it holds to group rank (r+1) % N, as two messages with `dist.isend` (or
    `dist.batch_isend_irecv`), and receives the next K and then V block from group rank
    (r-1) % N with `dist.irecv` into buffers of the same shape and dtype. So each rank sends
    2(N-1) messages of exactly k's and v's size, in k's and v's dtype, and receives as many;
    no other communication call. One rank (N = 1): no communication.

    Overlap: the step's sends and receives are posted before the rank computes on the block
    it holds in that step, and waited after: every matrix product (`@`, matmul, einsum, bmm)
    that runs before the rank has its last block happens while one of its receives is posted
    and not yet waited. Compute each block with a matrix product; a block that causality
    masks entirely may be skipped.

    Memory: under `torch.no_grad()`, at most two K/V blocks of other ranks are alive in the
    rank at any moment (the one computed on, the one arriving); drop a block once done.

    Backward (stretch, README §7): `out.backward(g)` gives q, k and v the gradients of full
    attention with respect to this rank's shards (an autograd Function whose backward passes
    K/V and their gradient accumulators around the ring). Without it, only the forward is
    graded.
    """
    raise NotImplementedError("ring_attention: see README §4")


# ---- zigzag split (README §5) -----------------------------------------------------------------


def zigzag_split(seq_len: int, world_size: int) -> list[torch.Tensor]:
    """The global positions each rank holds under causal load balancing.

    Cut the sequence into 2N equal chunks 0 .. 2N-1; rank r takes chunk r and chunk 2N-1-r.

    Args:
        seq_len: S, a multiple of 2 * world_size (else ValueError).
        world_size: N >= 1 (else ValueError).

    Returns:
        A list of N int64 tensors of S/N positions each, ascending: entry r holds chunk r's
        positions followed by chunk 2N-1-r's.
    """
    raise NotImplementedError("zigzag_split: see README §5")


def zigzag_unsplit(shards: list[torch.Tensor], dim: int = 0) -> torch.Tensor:
    """The inverse of a zigzag split: put the shards back in sequence order.

    Args:
        shards: N tensors, shard r holding along `dim` the rows of the positions
            `zigzag_split(S, N)[r]` names (chunk r, then chunk 2N-1-r), each of S/N rows.
        dim: the sequence dim of the shards.

    Returns:
        A new tensor of S rows along `dim`, row p being position p: for any x,
        `zigzag_unsplit([x.index_select(dim, i) for i in zigzag_split(S, N)], dim)` equals x.
    """
    raise NotImplementedError("zigzag_unsplit: see README §5")


# ---- Ulysses (README §6) ----------------------------------------------------------------------


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      group: dist.ProcessGroup | None = None, causal: bool = False
                      ) -> torch.Tensor:
    """DeepSpeed-Ulysses: trade the sequence shard for a head shard, attend, trade back.

    Args:
        q, k: [batch, heads, S/N, dim], this rank's contiguous sequence shard.
        v: [batch, heads, S/N, dim_v].
        causal: causal attention in global positions.

    Returns:
        [batch, heads, S/N, dim_v]: this rank's rows of full attention, as `ring_attention`.

    Raises:
        ValueError: heads is not divisible by N, before any communication.

    Communication: all-to-alls only (`dist.all_to_all` or `dist.all_to_all_single`): one each
    for q, k and v, after which rank r holds heads [r*heads/N, (r+1)*heads/N) for the whole
    sequence, and one for the output back. Each moves the tensor once: a rank keeps 1/N of it
    and sends the other (N-1)/N, so a rank writes (N-1)/N of (|q| + |k| + |v| + |out|) bytes
    to the network in all. No backward is graded.
    """
    raise NotImplementedError("ulysses_attention: see README §6")


# ---- Megatron sequence parallelism (README §8) ------------------------------------------------


def gather_from_sequence_parallel_region(x: torch.Tensor,
                                         group: dist.ProcessGroup | None = None
                                         ) -> torch.Tensor:
    """All-gather along the sequence in forward, reduce-scatter along it in backward.

    Args:
        x: [batch, S/N, hidden], this rank's sequence shard.

    Returns:
        [batch, S, hidden], every rank's shard in rank order (a new tensor): exactly one
        `dist.all_gather` (or `dist.all_gather_into_tensor`) over `group`. In backward, x gets
        rows [r*S/N, (r+1)*S/N) of the sum over the group of the output's gradients: exactly
        one `dist.reduce_scatter` (or `dist.reduce_scatter_tensor`), nothing else.
    """
    raise NotImplementedError("gather_from_sequence_parallel_region: see README §8")


def reduce_scatter_to_sequence_parallel_region(x: torch.Tensor,
                                               group: dist.ProcessGroup | None = None
                                               ) -> torch.Tensor:
    """Reduce-scatter along the sequence in forward, all-gather along it in backward.

    Args:
        x: [batch, S, hidden], this rank's partial sum of a full-sequence activation; S
            divisible by N (else ValueError, before any communication).

    Returns:
        [batch, S/N, hidden]: rows [r*S/N, (r+1)*S/N) of the sum over the group of every
        rank's x: exactly one `dist.reduce_scatter` (or `dist.reduce_scatter_tensor`). In
        backward, x gets the all-gather (rank order along the sequence) of the output's
        gradients: exactly one `dist.all_gather` (or `dist.all_gather_into_tensor`).
    """
    raise NotImplementedError("reduce_scatter_to_sequence_parallel_region: see README §8")


def sp_mlp_block(x: torch.Tensor, ln_weight: torch.Tensor, ln_bias: torch.Tensor,
                 w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor,
                 group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """The MLP half of a transformer layer, tensor- and sequence-parallel (Megatron-SP).

    The dense block is `x + gelu(layer_norm(x) @ W1ᵀ + B1) @ W2ᵀ + B2` with
    `F.layer_norm(x, (hidden,), ln_weight, ln_bias, eps=1e-5)` and exact (erf) gelu.

    Args:
        x: [batch, S/N, hidden], this rank's sequence shard.
        ln_weight, ln_bias: [hidden], replicated.
        w1: [ffn/N, hidden], rows [r*ffn/N, (r+1)*ffn/N) of W1 (column-parallel).
        b1: [ffn/N], the same slice of B1.
        w2: [hidden, ffn/N], columns [r*ffn/N, (r+1)*ffn/N) of W2 (row-parallel).
        b2: [hidden], replicated; added once, after the sum over ranks.

    Returns:
        [batch, S/N, hidden]: this rank's rows of the dense block. Layer norm runs on the
        shard; the tensor-parallel region is entered with
        `gather_from_sequence_parallel_region` and left with
        `reduce_scatter_to_sequence_parallel_region`: one all-gather and one reduce-scatter
        forward, one of each backward, no all-reduce. Gradients: x, w1, b1, w2 get exactly
        the matching slices of the dense block's gradients; ln_weight, ln_bias and b2 get
        this rank's rows' share (their sum over the group is the dense gradient).
    """
    raise NotImplementedError("sp_mlp_block: see README §8")

"""The paged KV cache's tensor side: write new keys/values, copy blocks, decode attention.

You implement three functions (README §6). One layer's cache is a pair of contiguous tensors
`k_cache`, `v_cache` of shape `[num_blocks, block_size, kv_heads, head_dim]`; physical slot s
(from the allocator) is `k_cache[s // block_size, s % block_size]`. Everything works on any
device and floating dtype; nothing here may loop in Python over tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Store token i's key and value in slot `slot_mapping[i]`, in place.

    Args:
        k_cache, v_cache: `[num_blocks, block_size, kv_heads, head_dim]`, contiguous; modified.
        k, v: `[num_tokens, kv_heads, head_dim]`, new keys and values (cast to the cache dtype).
        slot_mapping: `[num_tokens]` integer tensor of physical slots; an entry of -1 means
            "no token here" (padding): that row of k/v is not written anywhere.
    Only the given slots change. Spec: `k_cache.view(-1, kv_heads, head_dim)[s] = k[i]` for
    every i with s = slot_mapping[i] >= 0, as one indexed assignment (no loop over tokens).
    """
    raise NotImplementedError("write_kv: see README §6")


def copy_blocks(k_cache: torch.Tensor, v_cache: torch.Tensor,
                copies: Sequence[tuple[int, int]]) -> None:
    """For each (src, dst) in `copies`, in order, copy block src into block dst, in place.

    Args:
        k_cache, v_cache: `[num_blocks, block_size, kv_heads, head_dim]`; modified.
        copies: (src_block, dst_block) pairs as returned by `BlockAllocator.pop_copies`.
    Whole blocks are copied (all block_size slots), in both caches; other blocks are untouched.
    """
    raise NotImplementedError("copy_blocks: see README §6")


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    block_tables: torch.Tensor, context_lens: torch.Tensor,
                    scale: float | None = None) -> torch.Tensor:
    """Decode attention: one query per sequence against its cached keys and values.

    Args:
        q: `[batch, num_heads, head_dim]`, the query of each sequence's newest token.
        k_cache, v_cache: `[num_blocks, block_size, kv_heads, head_dim]`; num_heads must be a
            multiple of kv_heads (grouped-query attention: query head h reads KV head
            h // (num_heads // kv_heads)); ValueError otherwise.
        block_tables: `[batch, max_blocks]` integer tensor; row b is sequence b's block table,
            padded with -1 after its last block.
        context_lens: `[batch]` integer tensor, the tokens each sequence attends to (>= 1):
            positions 0 .. context_lens[b] - 1, including the newest token (its key and value
            are already written). Slots past that length — the rest of the last block, and
            padding entries — must not contribute, whatever they hold.
        scale: multiplies q·k; default 1 / sqrt(head_dim).
    Returns:
        `[batch, num_heads, head_dim]` in q's dtype: softmax(scale · q·Kᵀ) · V per sequence
        and head, equal to dense attention over the same keys and values.
    Vectorised: no Python loop over tokens or blocks (a loop over the batch is allowed). Does
    not modify its inputs.
    """
    raise NotImplementedError("paged_attention: see README §6")

"""The paged KV cache's tensor side: write new keys/values, copy blocks, decode attention.

Reference solution. Caches are laid out `[num_blocks, block_size, kv_heads, head_dim]`, so
physical slot s is row `s` of the cache viewed as `[num_blocks * block_size, kv_heads,
head_dim]`; that view is what makes writes and gathers one indexing operation each.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    num_blocks, block_size, kv_heads, head_dim = k_cache.shape
    slots = slot_mapping.to(device=k_cache.device, dtype=torch.long)
    # Slot -1 marks padding (e.g. a batch slot with no sequence): its row must not land anywhere.
    keep = slots >= 0
    slots, k, v = slots[keep], k[keep], v[keep]
    k_cache.view(num_blocks * block_size, kv_heads, head_dim)[slots] = k.to(k_cache.dtype)
    v_cache.view(num_blocks * block_size, kv_heads, head_dim)[slots] = v.to(v_cache.dtype)


def copy_blocks(k_cache: torch.Tensor, v_cache: torch.Tensor,
                copies: Sequence[tuple[int, int]]) -> None:
    # In list order: a block copied into may be the source of a later copy.
    for src, dst in copies:
        k_cache[dst] = k_cache[src]
        v_cache[dst] = v_cache[src]


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    block_tables: torch.Tensor, context_lens: torch.Tensor,
                    scale: float | None = None) -> torch.Tensor:
    batch, num_heads, head_dim = q.shape
    _, block_size, kv_heads, _ = k_cache.shape
    if num_heads % kv_heads:
        raise ValueError(f"{num_heads} query heads are not a multiple of {kv_heads} KV heads")
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    tables = block_tables.to(device=q.device, dtype=torch.long)
    lens = context_lens.to(device=q.device, dtype=torch.long)
    max_tokens = tables.shape[1] * block_size

    # Gather every sequence's blocks into a dense [batch, max_blocks * block_size, ...] view
    # with one indexing operation; padding entries (-1) read block 0 and, like the positions
    # past each sequence's length, are masked out below.
    safe = tables.clamp(min=0)
    keys = k_cache[safe].view(batch, max_tokens, kv_heads, head_dim)
    values = v_cache[safe].view(batch, max_tokens, kv_heads, head_dim)
    # Grouped-query attention without copying K/V per query head: query head h = k * group + j
    # reads KV head k, so view the queries as [batch, kv_heads, group, head_dim].
    group = num_heads // kv_heads
    queries = q.view(batch, kv_heads, group, head_dim)

    scores = torch.einsum("bkgd,btkd->bkgt", queries, keys)
    if scores.dtype in (torch.float16, torch.bfloat16):
        scores = scores.float()  # softmax of half-precision scores in float32
    scores = scores * scale
    positions = torch.arange(max_tokens, device=q.device)
    past_end = positions[None, :] >= lens[:, None]                # [batch, max_tokens]
    scores = scores.masked_fill(past_end[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(values.dtype)
    out = torch.einsum("bkgt,btkd->bkgd", probs, values)
    return out.reshape(batch, num_heads, head_dim).to(q.dtype)

"""An independent paged_kv tensor side, written from the stub's docstrings and README only."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    slots = slot_mapping.to(device=k_cache.device, dtype=torch.long)
    keep = slots >= 0
    heads, dim = k_cache.shape[2], k_cache.shape[3]
    flat_k, flat_v = k_cache.view(-1, heads, dim), v_cache.view(-1, heads, dim)
    flat_k[slots[keep]] = k[keep].to(k_cache.dtype)
    flat_v[slots[keep]] = v[keep].to(v_cache.dtype)


def copy_blocks(k_cache: torch.Tensor, v_cache: torch.Tensor,
                copies: Sequence[tuple[int, int]]) -> None:
    for src, dst in copies:
        k_cache[int(dst)] = k_cache[int(src)]
        v_cache[int(dst)] = v_cache[int(src)]


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    block_tables: torch.Tensor, context_lens: torch.Tensor,
                    scale: float | None = None) -> torch.Tensor:
    batch, num_heads, dim = q.shape
    block_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
    if kv_heads < 1 or num_heads % kv_heads:
        raise ValueError(f"num_heads {num_heads} is not a multiple of kv_heads {kv_heads}")
    group = num_heads // kv_heads
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    work = torch.promote_types(q.dtype, torch.float32)  # never below the input's precision
    out = torch.empty_like(q)
    for b in range(batch):
        length = int(context_lens[b])
        blocks = block_tables[b, :-(-length // block_size)].to(torch.long)
        keys = k_cache[blocks].reshape(-1, kv_heads, dim)[:length].to(work)
        vals = v_cache[blocks].reshape(-1, kv_heads, dim)[:length].to(work)
        keys = keys.repeat_interleave(group, dim=1)  # [length, num_heads, dim]
        vals = vals.repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,lhd->hl", q[b].to(work), keys) * scale
        weights = torch.softmax(scores, dim=-1)
        out[b] = torch.einsum("hl,lhd->hd", weights, vals).to(q.dtype)
    return out

"""A tiny decoder with a static KV cache and a capturable decode step. Provided: do not edit.

`TinyDecoder.decode(tokens, positions, rows)` runs one decode step for a batch of sequences.
Entry i is the token `tokens[i]` at position `positions[i]` of the sequence that lives in row
`rows[i]` of the KV cache. The step writes that token's keys and values into the cache at
`[layer, rows[i], positions[i]]` and attends over slots `0..positions[i]` of the same row.

Everything is preallocated and every shape depends only on the batch size, so the step can be
captured into a CUDA graph: no host syncs, no data-dependent shapes, no checks. The cache has
one extra slot per row, `pad_position == max_len`: an entry at that position writes there and
changes nothing a real entry reads (a real entry at position p reads slots 0..p < max_len).
Padded entries of a graph bucket use it (README §4).

    model = build_model(DecoderConfig(), seed=0)
    logits = model.decode(tokens, positions, rows)     # [batch, vocab_size]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class DecoderConfig:
    """Sizes of the decoder. `max_batch` rows of `max_len` tokens fit in the KV cache."""

    vocab_size: int = 64
    hidden: int = 32
    num_layers: int = 2
    num_heads: int = 4
    max_batch: int = 12
    max_len: int = 40

    def __post_init__(self) -> None:
        sizes = (self.vocab_size, self.hidden, self.num_layers, self.num_heads, self.max_batch,
                 self.max_len)
        if min(sizes) < 1:
            raise ValueError(f"every size of DecoderConfig must be positive, got {self}")
        if self.hidden % self.num_heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of num_heads "
                             f"({self.num_heads})")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.num_heads


class Block(nn.Module):
    """Pre-norm attention + MLP block that reads and writes one layer of the KV cache."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.num_heads, self.head_dim = config.num_heads, config.head_dim
        self.norm1 = nn.LayerNorm(config.hidden)
        self.qkv = nn.Linear(config.hidden, 3 * config.hidden)
        self.proj = nn.Linear(config.hidden, config.hidden)
        self.norm2 = nn.LayerNorm(config.hidden)
        self.fc1 = nn.Linear(config.hidden, 4 * config.hidden)
        self.fc2 = nn.Linear(4 * config.hidden, config.hidden)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, rows: torch.Tensor,
                k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """x [batch, hidden] -> [batch, hidden].

        k_cache, v_cache: [max_batch, max_len + 1, heads, head_dim], written in place.
        """
        batch = x.shape[0]
        q, k, v = self.qkv(self.norm1(x)).view(batch, 3, self.num_heads, self.head_dim).unbind(1)
        k_cache.index_put_((rows, positions), k)
        v_cache.index_put_((rows, positions), v)
        keys, values = k_cache[rows], v_cache[rows]             # [batch, slots, heads, head_dim]
        scores = torch.einsum("bhd,bshd->bhs", q, keys) / math.sqrt(self.head_dim)
        future = slots[None, :] > positions[:, None]             # [batch, slots]
        scores = scores.masked_fill(future[:, None, :], float("-inf"))
        attended = torch.einsum("bhs,bshd->bhd", scores.softmax(dim=-1), values)
        x = x + self.proj(attended.reshape(batch, -1))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class TinyDecoder(nn.Module):
    """Embeddings, `num_layers` blocks, a final norm and an untied LM head.

    Buffers: `k_cache`, `v_cache` [num_layers, max_batch, max_len + 1, num_heads, head_dim],
    zeros at start; slot `max_len` of every row is the pad slot.
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden)
        self.pos_embed = nn.Embedding(config.max_len + 1, config.hidden)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.norm = nn.LayerNorm(config.hidden)
        self.head = nn.Linear(config.hidden, config.vocab_size, bias=False)
        shape = (config.num_layers, config.max_batch, config.max_len + 1, config.num_heads,
                 config.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))
        self.register_buffer("slots", torch.arange(config.max_len + 1))

    @property
    def max_batch(self) -> int:
        return self.config.max_batch

    @property
    def max_len(self) -> int:
        return self.config.max_len

    @property
    def pad_position(self) -> int:
        """The position padded entries use: its slot is written but never read by real ones."""
        return self.config.max_len

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.head.weight.dtype

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor, positions: torch.Tensor,
               rows: torch.Tensor) -> torch.Tensor:
        """One decode step; returns new logits [batch, vocab_size] in the model's dtype.

        tokens, positions, rows: int64 [batch] on the model's device. Entry i writes the cache at
        [:, rows[i], positions[i]] and attends over slots 0..positions[i] of row rows[i].
        Unchecked (it is captured): tokens in [0, vocab_size), rows in [0, max_batch),
        positions in [0, max_len] (max_len is the pad position), and no two entries with the
        same (row, position) unless that position is the pad position.
        """
        x = self.embed(tokens) + self.pos_embed(positions)
        for layer, block in enumerate(self.blocks):
            x = block(x, positions, rows, self.k_cache[layer], self.v_cache[layer], self.slots)
        return self.head(self.norm(x))

    @torch.no_grad()
    def reset_cache(self) -> None:
        """Zero both caches in place (their storage stays the same)."""
        self.k_cache.zero_()
        self.v_cache.zero_()


def build_model(config: DecoderConfig | None = None, seed: int = 0,
                dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
                ) -> TinyDecoder:
    """A TinyDecoder whose weights depend only on `seed` (the global RNG is left as it was)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TinyDecoder(config or DecoderConfig())
    return model.to(device=device, dtype=dtype).eval()

"""The sizes of a GPT (README §3). Provided: do not edit.

    config = GPTConfig(vocab_size=256, dim=64, n_layers=2, n_heads=4, n_kv_heads=2)
    config.head_dim      # dim // n_heads = 16
    config.hidden_dim    # the SwiGLU width: 4 * dim * 2/3, rounded up to a multiple of 16
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPTConfig:
    """Sizes of a Llama-style decoder-only transformer.

    vocab_size   tokens the embedding and the (tied) output head know
    dim          width of the residual stream
    n_layers     transformer blocks
    n_heads      query heads; head_dim = dim // n_heads
    n_kv_heads   key/value heads (grouped-query attention); None means n_heads (plain multi-head)
    ffn_dim      SwiGLU hidden width; None means hidden_dim below
    max_seq_len  the longest sequence forward() and generate() accept (the RoPE table's length)
    rope_base    the RoPE base b: frequency i is b ** (-2i / head_dim)
    norm_eps     RMSNorm's epsilon
    """

    vocab_size: int = 256
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int | None = None
    ffn_dim: int | None = None
    max_seq_len: int = 128
    rope_base: float = 10000.0
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        if min(self.vocab_size, self.dim, self.n_layers, self.n_heads, self.max_seq_len) < 1:
            raise ValueError(f"every size of GPTConfig must be positive, got {self}")
        if self.dim % self.n_heads:
            raise ValueError(f"dim ({self.dim}) must be a multiple of n_heads ({self.n_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim ({self.head_dim}) must be even for RoPE")
        if self.kv_heads < 1 or self.n_heads % self.kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads "
                             f"({self.kv_heads})")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_heads(self) -> int:
        """n_kv_heads, or n_heads when it is None."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def hidden_dim(self) -> int:
        """The SwiGLU width: ffn_dim, or 2/3 of 4·dim rounded up to a multiple of 16 (Llama's
        rule, which keeps the parameter count of a 4·dim GELU MLP with three matrices)."""
        if self.ffn_dim is not None:
            return self.ffn_dim
        width = int(2 * 4 * self.dim / 3)
        return 16 * ((width + 15) // 16)

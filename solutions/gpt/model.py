"""Reference solution of gpt: a Llama-style GPT built from its parts (README §5-8).

Read it top to bottom as a worked example: each part is the smallest plain-torch version of the
formula in the README, with the one design decision that matters written above it. The layout of
the parameters (names, shapes, no biases, tied head) follows Llama [Touvron et al. 2023] and
nanoGPT; the initialisation is GPT-2's [Radford et al. 2019].
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from assignments.gpt.config import GPTConfig


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float16/bfloat16 are widened to float32 for reductions and softmax; float32 and float64
    stay as they are (torch.promote_types never narrows)."""
    return torch.promote_types(dtype, torch.float32)


# ---- RMSNorm (README §5.1) ----------------------------------------------------------------------


class RMSNorm(nn.Module):
    """y = x * rsqrt(mean(x²) + eps) * weight [Zhang & Sennrich 2019]: LayerNorm without the
    mean subtraction and without the bias, one reduction instead of two."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The mean of squares of a bf16 row loses digits fast (8 bits of mantissa); widen first.
        compute = _compute_dtype(x.dtype)
        xf = x.to(compute)
        # eps goes *inside* the square root: it bounds rstd by 1/sqrt(eps) for an all-zero row.
        rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (xf * rstd * self.weight.to(compute)).to(x.dtype)


class RMSNormFunction(torch.autograd.Function):
    """RMSNorm with a hand-written backward that keeps only x, weight and one number per row.

    With r = rsqrt(mean(x²) + eps), x̂ = x·r and y = w·x̂, the chain rule gives
        dL/dw = Σ_rows g·x̂
        dL/dx = r·(g·w − x̂·mean(g·w·x̂))
    (dr/dx_j = −r³·x_j/D). x̂ is recomputed from x and r in backward: saving it too would keep a
    second activation of x's size alive from forward to backward, for nothing.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        compute = _compute_dtype(x.dtype)
        xf = x.to(compute)
        rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)  # [..., 1]
        ctx.save_for_backward(x, weight, rstd)
        return (xf * rstd * weight.to(compute)).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        x, weight, rstd = ctx.saved_tensors
        compute = rstd.dtype
        xhat = x.to(compute) * rstd  # recomputed: one multiply, no extra memory held
        gw = grad_out.to(compute) * weight.to(compute)
        grad_x = rstd * (gw - xhat * (gw * xhat).mean(dim=-1, keepdim=True))
        grad_w = (grad_out.to(compute) * xhat).reshape(-1, x.shape[-1]).sum(dim=0)
        return grad_x.to(x.dtype), grad_w.to(weight.dtype), None


# ---- rotary position embedding (README §5.2) -----------------------------------------------------


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    # GPT-NeoX / Llama pair element i with element i + d/2 (the halves), so that the rotation is
    # two contiguous slices and one concatenation; GPT-J interleaves (i with i + 1) instead.
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((-x2, x1), dim=-1)


def rope_cache(seq_len: int, head_dim: int, base: float = 10000.0,
               dtype: torch.dtype = torch.float32,
               device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    # RoFormer [Su et al. 2021]: frequency i is base^(-2i/d); the angle is position · frequency.
    # Angles in float64: at position 4096 a float32 angle is off by ~2e-4 rad already.
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64, device=device)
                        / head_dim)
    positions = torch.arange(seq_len, dtype=torch.float64, device=device)
    angles = torch.outer(positions, inv_freq)  # [seq_len, head_dim / 2]
    angles = torch.cat((angles, angles), dim=-1)  # the same frequency in both halves
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         positions: torch.Tensor | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    if positions is None:
        positions = torch.arange(q.shape[-2], device=q.device)
    # cos[positions] is [seq, d] or [batch, seq, d]; insert the head axis so it broadcasts.
    c = cos[positions].unsqueeze(-3)
    s = sin[positions].unsqueeze(-3)
    q_rot = q * c.to(q.dtype) + rotate_half(q) * s.to(q.dtype)
    k_rot = k * c.to(k.dtype) + rotate_half(k) * s.to(k.dtype)
    return q_rot, k_rot


# ---- SwiGLU MLP (README §5.3) -------------------------------------------------------------------


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)) [Shazeer 2020]: the gate decides, per hidden unit, how much
    of `up`'s value passes."""

    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, hidden_dim, bias=False)
        self.up = nn.Linear(dim, hidden_dim, bias=False)
        self.down = nn.Linear(hidden_dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


# ---- attention (README §5.4) --------------------------------------------------------------------


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              causal: bool = True) -> torch.Tensor:
    n_heads, n_kv = q.shape[1], k.shape[1]
    if k.shape != v.shape:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must have the same shape")
    if n_heads % n_kv:
        raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv})")
    seq_q, seq_k, head_dim = q.shape[-2], k.shape[-2], q.shape[-1]
    if causal and seq_q > seq_k:
        raise ValueError(f"causal attention needs seq_q ({seq_q}) <= seq_k ({seq_k})")
    # Grouped-query attention [Ainslie et al. 2023]: query heads g·group .. g·group + group - 1
    # share K/V head g, so each K/V head is repeated *in place* (repeat_interleave), not tiled.
    group = n_heads // n_kv
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    compute = _compute_dtype(q.dtype)
    # 1/sqrt(d) keeps the scores' variance near 1 whatever head_dim is [Vaswani et al. 2017].
    scores = (q.to(compute) @ k.to(compute).transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))
    if causal:
        # Query i sits at absolute position seq_k - seq_q + i: it sees keys up to there,
        # itself included (the diagonal offset is what makes a decode step see the whole cache).
        visible = torch.ones(seq_q, seq_k, dtype=torch.bool, device=q.device) \
            .tril(diagonal=seq_k - seq_q)
        scores = scores.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return (probs @ v.to(compute)).to(q.dtype)


# ---- the model (README §6-7) ------------------------------------------------------------------


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = config.n_heads, config.kv_heads, config.head_dim
        self.wq = nn.Linear(config.dim, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(config.dim, self.n_kv * self.head_dim, bias=False)
        self.wv = nn.Linear(config.dim, self.n_kv * self.head_dim, bias=False)
        self.wo = nn.Linear(self.n_heads * self.head_dim, config.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                positions: torch.Tensor | None = None, kv_cache: dict | None = None
                ) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.wq(x).view(batch, seq, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(batch, seq, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(batch, seq, self.n_kv, self.head_dim).transpose(1, 2)
        # Keys are rotated *before* they enter the cache: a cached key keeps the rotation of its
        # own position, and a query at position m then scores q_m·k_n with angle m − n.
        q, k = apply_rotary_pos_emb(q, k, cos, sin, positions)
        if kv_cache is not None:
            if "k" in kv_cache:
                k = torch.cat((kv_cache["k"], k), dim=2)
                v = torch.cat((kv_cache["v"], v), dim=2)
            kv_cache["k"], kv_cache["v"] = k, v
        out = attention(q, k, v, causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, self.n_heads * self.head_dim))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(config.dim, config.norm_eps)
        self.attn = CausalSelfAttention(config)
        self.mlp_norm = RMSNorm(config.dim, config.norm_eps)
        self.mlp = SwiGLU(config.dim, config.hidden_dim)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                positions: torch.Tensor | None = None, kv_cache: dict | None = None
                ) -> torch.Tensor:
        # Pre-norm: the residual stream itself is never normalised, so gradients reach the
        # embedding through a chain of additions [Xiong et al. 2020].
        h = x + self.attn(self.attn_norm(x), cos, sin, positions, kv_cache)
        return h + self.mlp(self.mlp_norm(h))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.dim)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.dim, config.norm_eps)
        self.lm_head = nn.Linear(config.dim, config.vocab_size, bias=False)
        # Weight tying [Press & Wolf 2017]: one [vocab, dim] matrix, not two.
        self.lm_head.weight = self.tok_emb.weight
        # Kept in float64 and non-persistent: model.double() then loses nothing, model.float()
        # narrows them, and state_dict() holds parameters only.
        cos, sin = rope_cache(config.max_seq_len, config.head_dim, config.rope_base,
                              dtype=torch.float64)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.init_weights()

    def init_weights(self) -> None:
        std = 0.02
        residual_std = std / math.sqrt(2 * self.config.n_layers)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=std)
            elif isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)
        # GPT-2: each block adds two projections into the residual stream; scaling them by
        # 1/sqrt(2·n_layers) keeps the stream's variance at init independent of depth.
        for block in self.blocks:
            nn.init.normal_(block.attn.wo.weight, mean=0.0, std=residual_std)
            nn.init.normal_(block.mlp.down.weight, mean=0.0, std=residual_std)

    def _logits(self, idx: torch.Tensor, positions: torch.Tensor | None = None,
                caches: list[dict] | None = None) -> torch.Tensor:
        x = self.tok_emb(idx)
        for i, block in enumerate(self.blocks):
            x = block(x, self.cos, self.sin, positions, None if caches is None else caches[i])
        return self.lm_head(self.norm(x))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if idx.shape[1] > self.config.max_seq_len:
            raise ValueError(f"sequence of {idx.shape[1]} tokens is longer than max_seq_len "
                             f"({self.config.max_seq_len})")
        logits = self._logits(idx)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                   ignore_index=-1)
        return logits, loss

    @staticmethod
    def _pick(logits: torch.Tensor, temperature: float, top_k: int | None,
              generator: torch.Generator | None) -> torch.Tensor:
        if temperature == 0:
            return logits.argmax(dim=-1, keepdim=True)
        logits = logits / temperature
        if top_k is not None:
            kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        return torch.multinomial(probs, 1, generator=generator)

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None, generator: torch.Generator | None = None,
                 use_cache: bool = True) -> torch.Tensor:
        length = idx.shape[1]
        if length + max_new_tokens > self.config.max_seq_len:
            raise ValueError(f"{length} prompt tokens + {max_new_tokens} new tokens exceed "
                             f"max_seq_len ({self.config.max_seq_len})")
        was_training = self.training
        self.eval()
        out = idx
        if use_cache:
            # Prefill: the whole prompt once, filling every layer's cache.
            caches: list[dict] = [{} for _ in self.blocks]
            logits = self._logits(idx, torch.arange(length, device=idx.device), caches)[:, -1]
        for step in range(max_new_tokens):
            if not use_cache:
                logits = self._logits(out)[:, -1]  # recompute everything: O(T²) per step
            token = self._pick(logits, temperature, top_k, generator)
            out = torch.cat((out, token), dim=1)
            if use_cache and step + 1 < max_new_tokens:
                # Decode: one token at its true position (the number of tokens cached so far).
                position = torch.arange(length, length + 1, device=idx.device)
                logits = self._logits(token, position, caches)[:, -1]
                length += 1
        self.train(was_training)
        return out

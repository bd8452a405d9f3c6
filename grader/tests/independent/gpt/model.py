"""An independent gpt submission, written from the stub's docstrings and the README only, by
someone other than the reference's author (it replaces a stopgap written by the author).

Choices of its own where the contract allows: grouped-query attention broadcasts each K/V head
over its group of query heads (q viewed as [b, kv_heads, group, T, d]) instead of repeating K
and V; the causal mask compares query and key positions; rotate_half is a roll by d/2 with the
first half negated; the RoPE tables are built on demand in the activations' dtype from float64
angles and kept in a small dict (no buffers, so dtype conversions of the module never touch
them); the KV cache is a static buffer of max_seq_len positions per layer, filled in place.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from assignments.gpt.config import GPTConfig

_HALF = (torch.float16, torch.bfloat16)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in _HALF else dtype


# ---- RMSNorm ------------------------------------------------------------------------------------


def _inv_rms(xc: torch.Tensor, eps: float) -> torch.Tensor:
    """1 / sqrt(mean of squares over the last dim + eps), shape [..., 1], in xc's dtype."""
    return torch.rsqrt(torch.mean(xc * xc, dim=-1, keepdim=True) + eps)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cdt = _compute_dtype(x.dtype)
        xc = x.to(cdt)
        return (xc * _inv_rms(xc, self.eps) * self.weight.to(cdt)).to(x.dtype)


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        cdt = _compute_dtype(x.dtype)
        xc = x.to(cdt)
        rstd = _inv_rms(xc, eps)
        y = (xc * rstd * weight.to(cdt)).to(x.dtype)
        ctx.save_for_backward(x, weight, rstd)
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        x, weight, rstd = ctx.saved_tensors
        cdt = rstd.dtype
        xhat = x.to(cdt) * rstd
        g = grad_out.to(cdt)
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:
            gw = g * weight.to(cdt)
            proj = torch.mean(gw * xhat, dim=-1, keepdim=True)
            grad_x = (rstd * (gw - xhat * proj)).to(x.dtype)
        if ctx.needs_input_grad[1]:
            dim = x.shape[-1]
            grad_w = (g * xhat).reshape(-1, dim).sum(dim=0).to(weight.dtype)
        return grad_x, grad_w, None


# ---- rotary position embedding ---------------------------------------------------------------


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"rotate_half needs an even last dimension, got {d}")
    half = d // 2
    sign = torch.ones(d, dtype=x.dtype, device=x.device)
    sign[:half] = -1
    # roll by d/2 swaps the halves: [x2, x1]; the sign makes it [-x2, x1]
    return torch.roll(x, shifts=half, dims=-1) * sign


def rope_cache(seq_len: int, head_dim: int, base: float = 10000.0,
               dtype: torch.dtype = torch.float32,
               device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    half = head_dim // 2
    exponent = torch.arange(half, dtype=torch.float64) * (2.0 / head_dim)
    inv_freq = torch.pow(torch.tensor(float(base), dtype=torch.float64), -exponent)
    pos = torch.arange(seq_len, dtype=torch.float64)
    angles = pos.unsqueeze(1) * inv_freq.unsqueeze(0)  # [seq, half]
    angles = angles.repeat(1, 2)  # column j uses frequency j mod half
    return angles.cos().to(dtype=dtype, device=device), angles.sin().to(dtype=dtype,
                                                                          device=device)


def _table_at(table: torch.Tensor, positions: torch.Tensor | None, seq: int,
              dtype: torch.dtype) -> torch.Tensor:
    """Rows of `table` at `positions`, shaped to broadcast over [b, heads, seq, d]."""
    if positions is None:
        rows = table[:seq]
    else:
        rows = table[positions.to(device=table.device, dtype=torch.long)]
    rows = rows.to(dtype)
    if rows.dim() == 3:  # [b, seq, d] -> [b, 1, seq, d]
        rows = rows.unsqueeze(1)
    return rows


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         positions: torch.Tensor | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    c = _table_at(cos, positions, q.shape[-2], q.dtype)
    s = _table_at(sin, positions, q.shape[-2], q.dtype)
    q_rot = q * c + rotate_half(q) * s
    k_rot = (k.to(q.dtype) * c + rotate_half(k.to(q.dtype)) * s).to(k.dtype)
    return q_rot, k_rot


# ---- SwiGLU -------------------------------------------------------------------------------------


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, hidden_dim, bias=False)
        self.up = nn.Linear(dim, hidden_dim, bias=False)
        self.down = nn.Linear(hidden_dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.gate(x)
        return self.down(a * torch.sigmoid(a) * self.up(x))


# ---- attention ----------------------------------------------------------------------------------


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              causal: bool = True) -> torch.Tensor:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"attention takes 4-D q, k, v; got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and "
                         f"{tuple(v.shape)}")
    b, n_heads, tq, d = q.shape
    kb, n_kv, tk, kd = k.shape
    if n_kv < 1 or n_heads % n_kv:
        raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv})")
    if kb != b or kd != d:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} disagree in batch or "
                         f"head_dim")
    if causal and tq > tk:
        raise ValueError(f"causal attention needs seq_q <= seq_k, got {tq} > {tk}")
    group = n_heads // n_kv
    cdt = _compute_dtype(q.dtype)
    qg = q.to(cdt).reshape(b, n_kv, group, tq, d)  # query head h = j * group + r
    kg = k.to(cdt).unsqueeze(2)  # [b, n_kv, 1, tk, d], shared by the group
    vg = v.to(cdt).unsqueeze(2)
    scores = torch.matmul(qg, kg.transpose(-1, -2)) * (1.0 / math.sqrt(d))
    if causal:
        q_pos = torch.arange(tk - tq, tk, device=q.device).unsqueeze(1)
        k_pos = torch.arange(tk, device=q.device).unsqueeze(0)
        scores = scores.masked_fill(k_pos > q_pos, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs, vg)  # [b, n_kv, group, tq, d]
    return out.reshape(b, n_heads, tq, d).to(q.dtype)


# ---- the model ----------------------------------------------------------------------------------


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.n_kv_heads = config.kv_heads
        self.head_dim = config.head_dim
        self.max_seq_len = config.max_seq_len
        self.wq = nn.Linear(config.dim, config.n_heads * config.head_dim, bias=False)
        self.wk = nn.Linear(config.dim, config.kv_heads * config.head_dim, bias=False)
        self.wv = nn.Linear(config.dim, config.kv_heads * config.head_dim, bias=False)
        self.wo = nn.Linear(config.n_heads * config.head_dim, config.dim, bias=False)

    def _heads(self, t: torch.Tensor, n: int) -> torch.Tensor:
        b, seq, _ = t.shape
        return t.view(b, seq, n, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                positions: torch.Tensor | None = None, kv_cache: dict | None = None
                ) -> torch.Tensor:
        b, seq, _ = x.shape
        q = self._heads(self.wq(x), self.n_heads)
        k = self._heads(self.wk(x), self.n_kv_heads)
        v = self._heads(self.wv(x), self.n_kv_heads)
        past = 0 if kv_cache is None else kv_cache.get("length", 0)
        if positions is None:
            positions = torch.arange(past, past + seq, device=x.device)
        q, k = apply_rotary_pos_emb(q, k, cos, sin, positions)
        if kv_cache is not None:
            # A static buffer per layer: keys are stored already rotated, at their positions.
            if "k" not in kv_cache:
                shape = (b, self.n_kv_heads, self.max_seq_len, self.head_dim)
                kv_cache["k"] = k.new_zeros(shape)
                kv_cache["v"] = v.new_zeros(shape)
            end = past + seq
            kv_cache["k"][:, :, past:end] = k
            kv_cache["v"][:, :, past:end] = v
            kv_cache["length"] = end
            k, v = kv_cache["k"][:, :, :end], kv_cache["v"][:, :, :end]
        y = attention(q, k, v, causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, seq, self.n_heads * self.head_dim))


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
        self.lm_head.weight = self.tok_emb.weight  # tied: one Parameter
        self._tables: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self.init_weights()

    def init_weights(self) -> None:
        std = 0.02
        residual_std = 0.02 / math.sqrt(2 * self.config.n_layers)
        with torch.no_grad():
            self.tok_emb.weight.normal_(0.0, std)
            for block in self.blocks:
                attn, mlp = block.attn, block.mlp
                for lin in (attn.wq, attn.wk, attn.wv, mlp.gate, mlp.up):
                    lin.weight.normal_(0.0, std)
                attn.wo.weight.normal_(0.0, residual_std)
                mlp.down.weight.normal_(0.0, residual_std)
                block.attn_norm.weight.fill_(1.0)
                block.mlp_norm.weight.fill_(1.0)
            self.norm.weight.fill_(1.0)
        self.lm_head.weight = self.tok_emb.weight

    def _rope(self, dtype: torch.dtype, device: torch.device
              ) -> tuple[torch.Tensor, torch.Tensor]:
        key = (dtype, str(device))
        if key not in self._tables:
            cfg = self.config
            self._tables[key] = rope_cache(cfg.max_seq_len, cfg.head_dim, cfg.rope_base,
                                           dtype=dtype, device=device)
        return self._tables[key]

    def _run(self, idx: torch.Tensor, caches: list[dict] | None = None,
             start: int = 0) -> torch.Tensor:
        x = self.tok_emb(idx)
        cos, sin = self._rope(x.dtype, x.device)
        seq = idx.shape[1]
        positions = torch.arange(start, start + seq, device=idx.device)
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, positions, None if caches is None else caches[i])
        return self.lm_head(self.norm(x))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if idx.dim() != 2:
            raise ValueError(f"idx must be [batch, seq], got {tuple(idx.shape)}")
        seq = idx.shape[1]
        if seq < 1 or seq > self.config.max_seq_len:
            raise ValueError(f"sequence of {seq} tokens; the model takes 1 .. "
                             f"{self.config.max_seq_len}")
        logits = self._run(idx)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                   ignore_index=-1)
        return logits, loss

    def _pick(self, logits: torch.Tensor, temperature: float, top_k: int | None,
              generator: torch.Generator | None) -> torch.Tensor:
        if temperature == 0:
            return torch.argmax(logits, dim=-1, keepdim=True)
        scaled = logits / temperature
        if top_k is not None:
            k = min(int(top_k), scaled.shape[-1])
            if k < 1:
                raise ValueError(f"top_k must be >= 1, got {top_k}")
            kth = torch.topk(scaled, k, dim=-1).values[..., -1:]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        probs = torch.softmax(scaled, dim=-1)
        return torch.multinomial(probs, 1, generator=generator)

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None, generator: torch.Generator | None = None,
                 use_cache: bool = True) -> torch.Tensor:
        if idx.dim() != 2 or idx.shape[1] < 1:
            raise ValueError(f"idx must be [batch, seq] with seq >= 1, got {tuple(idx.shape)}")
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        total = idx.shape[1] + max_new_tokens
        if total > self.config.max_seq_len:
            raise ValueError(f"prompt of {idx.shape[1]} + {max_new_tokens} new tokens exceeds "
                             f"max_seq_len {self.config.max_seq_len}")
        was_training = self.training
        self.eval()
        try:
            seq = idx.clone()
            if max_new_tokens == 0:
                return seq
            if use_cache:
                caches: list[dict] = [{} for _ in self.blocks]
                logits = self._run(seq, caches, 0)[:, -1]
                for step in range(max_new_tokens):
                    nxt = self._pick(logits, temperature, top_k, generator)
                    seq = torch.cat((seq, nxt.to(seq.dtype)), dim=1)
                    if step + 1 < max_new_tokens:
                        logits = self._run(nxt, caches, seq.shape[1] - 1)[:, -1]
            else:
                for _ in range(max_new_tokens):
                    logits = self(seq)[0][:, -1]
                    nxt = self._pick(logits, temperature, top_k, generator)
                    seq = torch.cat((seq, nxt.to(seq.dtype)), dim=1)
            return seq
        finally:
            self.train(was_training)

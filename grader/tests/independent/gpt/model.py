"""A second gpt submission, written from the stub's docstrings and README, differently from the
reference where the contract allows.

Caveat for the lead: the assignment's author wrote it (no one else was available in the round
that built gpt), so it is a stopgap for the fairness check of authoring.md (an implementation by
someone who did not write the solution) and should be replaced by a truly independent one.

Where it differs: RMSNorm's statistic by einsum; RMSNormFunction saves rstd of shape
x.shape[:-1] (no trailing 1) and sums grad_w by flatten; inverse frequencies through exp/log;
cos/sin gathered with index_select and rebuilt in the activations' dtype on every call (no
buffers); grouped-query attention without repeating K/V (queries reshaped into groups, einsum)
and the causal mask by torch.where on positions; a preallocated KV cache written in place;
init by parameter names; the loss by log_softmax and gather; top-k by sorting.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from assignments.gpt.config import GPTConfig


def _wide(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = _wide(x.dtype)
        y = x.to(w)
        ms = torch.einsum("...d,...d->...", y, y)[..., None] / y.shape[-1]
        return (y / torch.sqrt(ms + self.eps) * self.weight.to(w)).to(x.dtype)


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        w = _wide(x.dtype)
        y = x.to(w)
        rstd = 1.0 / torch.sqrt((y * y).mean(-1) + eps)  # shape x.shape[:-1]
        ctx.save_for_backward(x, weight, rstd)
        return (y * rstd[..., None] * weight.to(w)).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        x, weight, rstd = ctx.saved_tensors
        w = rstd.dtype
        r = rstd[..., None]
        xhat = x.to(w) * r
        g = grad_out.to(w)
        gw = g * weight.to(w)
        d = x.shape[-1]
        grad_x = r * gw - xhat * r * (gw * xhat).sum(-1, keepdim=True) / d
        grad_w = (g * xhat).flatten(0, -2).sum(0) if x.dim() > 1 else g * xhat
        return grad_x.to(x.dtype), grad_w.to(weight.dtype), None


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat([b.neg(), a], dim=-1)


def rope_cache(seq_len: int, head_dim: int, base: float = 10000.0,
               dtype: torch.dtype = torch.float32,
               device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    i = torch.arange(head_dim // 2, dtype=torch.float64, device=device)
    freq = torch.exp(-2.0 * i / head_dim * math.log(base))
    pos = torch.arange(seq_len, dtype=torch.float64, device=device)
    ang = pos[:, None] * freq[None, :]
    ang = ang.repeat(1, 2)
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         positions: torch.Tensor | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    if positions is None:
        positions = torch.arange(q.shape[2])
    c, s = cos.index_select(0, positions.reshape(-1)), sin.index_select(0, positions.reshape(-1))
    c = c.reshape(*positions.shape, -1)
    s = s.reshape(*positions.shape, -1)
    if positions.dim() == 2:
        c, s = c[:, None], s[:, None]

    def rot(t):
        return t * c.to(t.dtype) + rotate_half(t) * s.to(t.dtype)

    return rot(q), rot(k)


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, hidden_dim, bias=False)
        self.up = nn.Linear(dim, hidden_dim, bias=False)
        self.down = nn.Linear(hidden_dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = self.gate(x)
        return self.down(g * torch.sigmoid(g) * self.up(x))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              causal: bool = True) -> torch.Tensor:
    if k.shape != v.shape:
        raise ValueError("k and v differ")
    b, h, tq, d = q.shape
    hk, tk = k.shape[1], k.shape[2]
    if h % hk:
        raise ValueError("heads")
    if causal and tq > tk:
        raise ValueError("tq > tk")
    g = h // hk
    w = _wide(q.dtype)
    qg = q.to(w).reshape(b, hk, g, tq, d)
    s = torch.einsum("bkgqd,bktd->bkgqt", qg, k.to(w)) / math.sqrt(d)
    if causal:
        qpos = torch.arange(tk - tq, tk)[:, None]
        kpos = torch.arange(tk)[None, :]
        s = torch.where(kpos <= qpos, s, torch.tensor(float("-inf"), dtype=w))
    p = torch.softmax(s, dim=-1)
    out = torch.einsum("bkgqt,bktd->bkgqd", p, v.to(w))
    return out.reshape(b, h, tq, d).to(q.dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.h, self.hk, self.d = config.n_heads, config.kv_heads, config.head_dim
        self.wq = nn.Linear(config.dim, self.h * self.d, bias=False)
        self.wk = nn.Linear(config.dim, self.hk * self.d, bias=False)
        self.wv = nn.Linear(config.dim, self.hk * self.d, bias=False)
        self.wo = nn.Linear(self.h * self.d, config.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                positions: torch.Tensor | None = None, kv_cache: dict | None = None
                ) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.wq(x).reshape(b, t, self.h, self.d).permute(0, 2, 1, 3)
        k = self.wk(x).reshape(b, t, self.hk, self.d).permute(0, 2, 1, 3)
        v = self.wv(x).reshape(b, t, self.hk, self.d).permute(0, 2, 1, 3)
        q, k = apply_rotary_pos_emb(q, k, cos, sin, positions)
        if kv_cache is not None:
            n = kv_cache["n"]
            kv_cache["k"][:, :, n:n + t] = k
            kv_cache["v"][:, :, n:n + t] = v
            kv_cache["n"] = n + t
            k, v = kv_cache["k"][:, :, :n + t], kv_cache["v"][:, :, :n + t]
        o = attention(q, k, v, causal=True)
        return self.wo(o.permute(0, 2, 1, 3).reshape(b, t, self.h * self.d))


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
        x = x + self.attn(self.attn_norm(x), cos, sin, positions, kv_cache)
        return x + self.mlp(self.mlp_norm(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.dim)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layers)])
        self.norm = RMSNorm(config.dim, config.norm_eps)
        self.lm_head = nn.Linear(config.dim, config.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight
        self.init_weights()

    def init_weights(self) -> None:
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                elif name.endswith(("attn.wo.weight", "mlp.down.weight")):
                    p.normal_(0.0, 0.02 / math.sqrt(2 * self.config.n_layers))
                else:
                    p.normal_(0.0, 0.02)

    def _tables(self, dtype):
        # rebuilt in the activations' dtype each call
        return rope_cache(self.config.max_seq_len, self.config.head_dim, self.config.rope_base,
                          dtype=dtype)

    def _run(self, idx, positions=None, caches=None):
        x = self.tok_emb(idx)
        cos, sin = self._tables(x.dtype)
        for i, blk in enumerate(self.blocks):
            x = blk(x, cos, sin, positions, None if caches is None else caches[i])
        return self.lm_head(self.norm(x))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if idx.shape[1] > self.config.max_seq_len:
            raise ValueError("too long")
        logits = self._run(idx)
        if targets is None:
            return logits, None
        flat = targets.reshape(-1)
        logp = torch.log_softmax(logits.reshape(-1, logits.shape[-1]), -1)
        keep = flat != -1
        return logits, -logp[keep].gather(1, flat[keep][:, None]).mean()

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None, generator: torch.Generator | None = None,
                 use_cache: bool = True) -> torch.Tensor:
        b, t = idx.shape
        if t + max_new_tokens > self.config.max_seq_len:
            raise ValueError("too long")
        mode = self.training
        self.eval()
        seq = idx
        caches = None
        if use_cache and max_new_tokens > 0:
            p = self.tok_emb.weight
            caches = [{"n": 0,
                       "k": torch.zeros(b, self.config.kv_heads, self.config.max_seq_len,
                                        self.config.head_dim, dtype=p.dtype),
                       "v": torch.zeros(b, self.config.kv_heads, self.config.max_seq_len,
                                        self.config.head_dim, dtype=p.dtype)}
                      for _ in self.blocks]
            last = self._run(idx, None, caches)[:, -1]
        for i in range(max_new_tokens):
            if not use_cache:
                last = self._run(seq)[:, -1]
            if temperature == 0:
                nxt = torch.argmax(last, dim=-1)[:, None]
            else:
                z = last / temperature
                if top_k is not None:
                    vals = torch.sort(z, dim=-1, descending=True).values
                    cut = vals[:, min(top_k, z.shape[-1]) - 1][:, None]
                    z = torch.where(z < cut, torch.full_like(z, float("-inf")), z)
                nxt = torch.multinomial(F.softmax(z, dim=-1), 1, generator=generator)
            seq = torch.cat([seq, nxt], dim=1)
            if use_cache and i < max_new_tokens - 1:
                n = caches[0]["n"]
                last = self._run(nxt, torch.tensor([n]), caches)[:, -1]
        self.train(mode)
        return seq

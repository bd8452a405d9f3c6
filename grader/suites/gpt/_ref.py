"""References of the gpt hidden suite, computed in the parent in float64 with plain torch.

Written independently of the solution (RoPE as explicit 2-D rotations of pairs, attention with
an explicit head map), with the known mistakes a test names (`interleaved_rotate`, attention's
`kv_map="tiled"`, a mask hiding the diagonal, another scale), the whole model's logits, loss
and sampling loop recomputed from its weights, and the float32 tolerance of a GPT forward.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from grader.compare import Tolerance, bound
from grader.suites.gpt._cases import F32, F64, head_dim

# ---- references (float64, plain torch, independent of the solution) -----------------------------

def ref_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.to(F64)
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight.to(F64)


def ref_rms_norm_grads(x: torch.Tensor, weight: torch.Tensor, eps: float,
                       grad_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xl = x.to(F64).clone().requires_grad_(True)
    wl = weight.to(F64).clone().requires_grad_(True)
    gx, gw = torch.autograd.grad(ref_rms_norm(xl, wl, eps), (xl, wl), grad_out.to(F64))
    return gx, gw


def ref_rotate_half(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1]
    index = torch.tensor([(j + d // 2) % d for j in range(d)])
    sign = torch.tensor([-1.0 if j < d // 2 else 1.0 for j in range(d)], dtype=x.dtype)
    return x.index_select(-1, index) * sign


def interleaved_rotate(x: torch.Tensor) -> torch.Tensor:
    """The GPT-J layout (a known mistake): pairs (0, 1), (2, 3), ... -> (-x1, x0, -x3, x2)."""
    out = torch.empty_like(x)
    out[..., 0::2] = -x[..., 1::2]
    out[..., 1::2] = x[..., 0::2]
    return out


def ref_angles(length: int, head_dim: int, base: float) -> torch.Tensor:
    """[length, head_dim / 2] angles p · base^(-2i/d)."""
    i = torch.arange(head_dim // 2, dtype=F64)
    return torch.arange(length, dtype=F64)[:, None] * torch.pow(
        torch.tensor(base, dtype=F64), -2.0 * i / head_dim)[None, :]


def ref_rope_tables(length: int, head_dim: int, base: float) -> tuple[torch.Tensor, ...]:
    a = ref_angles(length, head_dim, base)
    return torch.cat((a.cos(), a.cos()), -1), torch.cat((a.sin(), a.sin()), -1)


def ref_rotate(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotate each pair (j, j + d/2) of x [b, h, s, d] by angle position · freq_j."""
    d = x.shape[-1]
    length = int(positions.max()) + 1
    a = ref_angles(length, d, base)[positions]  # [s, d/2] or [b, s, d/2]
    if a.dim() == 3:
        a = a[:, None]
    x = x.to(F64)
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return torch.cat((x1 * a.cos() - x2 * a.sin(), x2 * a.cos() + x1 * a.sin()), -1)


def ref_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                  kv_map: str = "grouped", diagonal: bool = True,
                  scale: float | None = None) -> torch.Tensor:
    """Attention in float64 with query head h reading K/V head h // group ("grouped") — or a
    known mistake: kv_map="tiled" (h % n_kv), diagonal=False (a mask hiding the own key),
    scale (another scale than 1/sqrt(d))."""
    q, k, v = q.to(F64), k.to(F64), v.to(F64)
    n_heads, n_kv = q.shape[1], k.shape[1]
    group = n_heads // n_kv
    heads = [h // group if kv_map == "grouped" else h % n_kv for h in range(n_heads)]
    k, v = k[:, heads], v[:, heads]
    sq, sk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    s = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(d) if scale is None else scale)
    if causal:
        query_pos = torch.arange(sk - sq, sk)[:, None]
        key_pos = torch.arange(sk)[None, :]
        visible = key_pos <= query_pos if diagonal else key_pos < query_pos
        s = s.masked_fill(~visible, float("-inf"))
    return torch.softmax(s, -1) @ v


def ref_swiglu(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor,
               down: torch.Tensor) -> torch.Tensor:
    x = x.to(F64)
    g = x @ gate.T.to(F64)
    return ((g * torch.sigmoid(g)) * (x @ up.T.to(F64))) @ down.T.to(F64)


def ref_logits(state: dict[str, torch.Tensor], config: dict[str, Any],
               idx: torch.Tensor) -> torch.Tensor:
    """The GPT's logits [batch, seq, vocab] in float64, recomputed from the weights."""
    eps, base = config["norm_eps"], config["rope_base"]
    n_heads, hd = config["n_heads"], head_dim(config)
    kv = config["n_kv_heads"] or n_heads
    b, t = idx.shape
    positions = torch.arange(t)
    x = state["tok_emb.weight"].to(F64)[idx]
    for i in range(config["n_layers"]):
        p = f"blocks.{i}."
        h = ref_rms_norm(x, state[p + "attn_norm.weight"], eps)
        q = (h @ state[p + "attn.wq.weight"].T).view(b, t, n_heads, hd).transpose(1, 2)
        k = (h @ state[p + "attn.wk.weight"].T).view(b, t, kv, hd).transpose(1, 2)
        v = (h @ state[p + "attn.wv.weight"].T).view(b, t, kv, hd).transpose(1, 2)
        q, k = ref_rotate(q, positions, base), ref_rotate(k, positions, base)
        a = ref_attention(q, k, v, causal=True).transpose(1, 2).reshape(b, t, n_heads * hd)
        x = x + a @ state[p + "attn.wo.weight"].T
        h = ref_rms_norm(x, state[p + "mlp_norm.weight"], eps)
        x = x + ref_swiglu(h, state[p + "mlp.gate.weight"], state[p + "mlp.up.weight"],
                           state[p + "mlp.down.weight"])
    return ref_rms_norm(x, state["norm.weight"], eps) @ state["tok_emb.weight"].T


def ref_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    keep = targets.reshape(-1) != -1
    logp = torch.log_softmax(logits.reshape(-1, logits.shape[-1]).to(F64), -1)
    return -logp[keep].gather(1, targets.reshape(-1)[keep][:, None]).mean()


def ref_generate(state: dict[str, torch.Tensor], config: dict[str, Any], idx: torch.Tensor,
                 max_new_tokens: int, temperature: float, top_k: int | None,
                 generator_seed: int | None) -> torch.Tensor:
    """The documented sampling loop over full recomputation (README §7)."""
    gen = None if generator_seed is None else torch.Generator().manual_seed(generator_seed)
    out = idx.clone()
    for _ in range(max_new_tokens):
        logits = ref_logits(state, config, out)[:, -1]
        if temperature == 0:
            token = logits.argmax(-1, keepdim=True)
        else:
            logits = logits / temperature
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.shape[-1]), -1).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            token = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)
        out = torch.cat((out, token), 1)
    return out


def gpt_tolerance(config: dict[str, Any], seq: int, magnitude: float) -> Tolerance:
    """A float32 forward of the GPT against the float64 reference: per layer a chain of dot
    products (dim for q/k/v, head_dim for scores, seq for softmax and p·v, n_heads·head_dim for
    wo, dim and hidden for the MLP), a few elementwise roundings, two norms; the head adds dim.
    `magnitude` bounds the size of the intermediate values the roundings are relative to."""
    per_layer = 2 * config["dim"] + head_dim(config) + 2 * seq + config["ffn_dim"] + 24
    depth = config["n_layers"] * per_layer + config["dim"] + 8
    return bound(F32, depth=depth, magnitude=magnitude)



"""An independent triton_kernels submission, written from the stub's docstrings and README only.

It proves the suites fair to a correct implementation laid out differently from the reference:
its own validation order and messages, keys walked with an explicit running maximum kept in
log2 units, a decode kernel that walks tokens block by block through the table, and launch
sizes of its own choosing. `selfcheck` grades it and requires every graded test to pass.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

__all__ = ["flash_attention", "paged_attention_decode", "rms_norm", "softmax"]

_LOG2E = 1.4426950408889634
_MAX_WIDTH = 16384
_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _pow2(n: int, least: int = 1) -> int:
    return max(least, triton.next_power_of_2(n))


def _floating(name: str, t: torch.Tensor) -> None:
    if t.dtype not in _FLOATS:
        raise ValueError(f"{name} must be float32, float16 or bfloat16, not {t.dtype}")


@triton.jit
def _row_softmax(src, dst, n_cols, src_row, src_col, dst_row, WIDTH: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, WIDTH)
    inside = cols < n_cols
    vals = tl.load(src + row * src_row + cols * src_col, mask=inside, other=float("-inf"))
    vals = vals.to(tl.float32)
    shifted = vals - tl.max(vals, axis=0)
    num = tl.exp(shifted)
    num = tl.where(inside, num, 0.0)
    out = num / tl.sum(num, axis=0)
    tl.store(dst + row * dst_row + cols, out.to(dst.dtype.element_ty), mask=inside)


def softmax(x: torch.Tensor) -> torch.Tensor:
    if x.dim() != 2:
        raise ValueError(f"softmax takes a 2-D tensor, got {x.dim()}-D")
    _floating("x", x)
    rows, cols = x.shape
    if cols > _MAX_WIDTH:
        raise ValueError(f"softmax rows may be at most {_MAX_WIDTH} wide, got {cols}")
    y = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    if rows and cols:
        _row_softmax[(rows,)](x, y, cols, x.stride(0), x.stride(1), y.stride(0),
                              WIDTH=_pow2(cols))
    return y


@triton.jit
def _row_rms(src, gain, dst, n_cols, eps, src_row, src_col, gain_col, dst_row,
             WIDTH: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, WIDTH)
    inside = cols < n_cols
    vals = tl.load(src + row * src_row + cols * src_col, mask=inside, other=0.0).to(tl.float32)
    g = tl.load(gain + cols * gain_col, mask=inside, other=0.0).to(tl.float32)
    mean_sq = tl.sum(vals * vals, axis=0) / n_cols
    out = vals * (1.0 / tl.sqrt(mean_sq + eps)) * g
    tl.store(dst + row * dst_row + cols, out.to(dst.dtype.element_ty), mask=inside)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    if x.dim() != 2:
        raise ValueError(f"rms_norm takes a 2-D x, got {x.dim()}-D")
    rows, dim = x.shape
    if weight.dim() != 1 or weight.shape[0] != dim:
        raise ValueError(f"weight must be [{dim}], got {list(weight.shape)}")
    _floating("x", x)
    if dim > _MAX_WIDTH:
        raise ValueError(f"rms_norm rows may be at most {_MAX_WIDTH} wide, got {dim}")
    y = torch.empty((rows, dim), dtype=x.dtype, device=x.device)
    if rows and dim:
        _row_rms[(rows,)](x, weight, y, dim, float(eps), x.stride(0), x.stride(1),
                          weight.stride(0), y.stride(0), WIDTH=_pow2(dim))
    return y


@triton.jit
def _flash_fwd(q, k, v, o, lse, seq_q, seq_k, dim, heads, qk_scale_log2,
               q_b, q_h, q_s, q_d, k_b, k_h, k_s, k_d, v_b, v_h, v_s, v_d,
               o_b, o_h, o_s, l_b, l_h,
               CAUSAL: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr, BD: tl.constexpr):
    qblock = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // heads
    h = bh % heads
    rows = qblock * BQ + tl.arange(0, BQ)
    feats = tl.arange(0, BD)
    row_ok = rows < seq_q
    feat_ok = feats < dim
    qt = tl.load(q + b * q_b + h * q_h + rows[:, None] * q_s + feats[None, :] * q_d,
                 mask=row_ok[:, None] & feat_ok[None, :], other=0.0).to(tl.float32)
    run_max = tl.full((BQ,), float("-inf"), tl.float32)  # in log2 units of the scaled scores
    run_sum = tl.zeros((BQ,), tl.float32)
    acc = tl.zeros((BQ, BD), tl.float32)
    stop = seq_k
    if CAUSAL:
        stop = tl.minimum(seq_k, (qblock + 1) * BQ)
    for start in range(0, stop, BK):
        keys = start + tl.arange(0, BK)
        key_ok = keys < seq_k
        kt = tl.load(k + b * k_b + h * k_h + keys[None, :] * k_s + feats[:, None] * k_d,
                     mask=key_ok[None, :] & feat_ok[:, None], other=0.0).to(tl.float32)
        s = tl.dot(qt, kt, input_precision="ieee") * qk_scale_log2
        allowed = key_ok[None, :]
        if CAUSAL:
            allowed = allowed & (keys[None, :] <= rows[:, None])
        s = tl.where(allowed, s, float("-inf"))
        new_max = tl.maximum(run_max, tl.max(s, axis=1))
        safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)
        p = tl.exp2(s - safe_max[:, None])
        decay = tl.exp2(run_max - safe_max)
        run_sum = run_sum * decay + tl.sum(p, axis=1)
        vt = tl.load(v + b * v_b + h * v_h + keys[:, None] * v_s + feats[None, :] * v_d,
                     mask=key_ok[:, None] & feat_ok[None, :], other=0.0).to(tl.float32)
        acc = acc * decay[:, None] + tl.dot(p, vt, input_precision="ieee")
        run_max = new_max
    out = acc / run_sum[:, None]
    tl.store(o + b * o_b + h * o_h + rows[:, None] * o_s + feats[None, :],
             out.to(o.dtype.element_ty), mask=row_ok[:, None] & feat_ok[None, :])
    tl.store(lse + b * l_b + h * l_h + rows, (run_max + tl.log2(run_sum)) / 1.4426950408889634,
             mask=row_ok)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k and v must all be [batch, heads, seq, dim]")
    batch, heads, seq_q, dim = q.shape
    if k.shape != v.shape or k.shape[0] != batch or k.shape[1] != heads or k.shape[3] != dim:
        raise ValueError(f"k and v must be [{batch}, {heads}, seq_k, {dim}], got "
                         f"{list(k.shape)} and {list(v.shape)}")
    seq_k = k.shape[2]
    if seq_q < 1 or seq_k < 1 or dim < 1 or dim > 256:
        raise ValueError(f"need seq_q, seq_k >= 1 and 1 <= dim <= 256, got {seq_q}, {seq_k}, "
                         f"{dim}")
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise ValueError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    _floating("q", q)
    if causal and seq_q != seq_k:
        raise ValueError(f"causal attention needs seq_q == seq_k, got {seq_q} and {seq_k}")
    scale = 1.0 / math.sqrt(dim) if scale is None else float(scale)
    out = torch.empty((batch, heads, seq_q, dim), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads, seq_q), dtype=torch.float32, device=q.device)
    if batch * heads == 0:
        return out, lse
    block = 32 if seq_q > 16 else 16
    grid = (triton.cdiv(seq_q, block), batch * heads)
    _flash_fwd[grid](q, k, v, out, lse, seq_q, seq_k, dim, heads, scale * _LOG2E,
                     *q.stride(), *k.stride(), *v.stride(), *out.stride()[:3],
                     *lse.stride()[:2], CAUSAL=bool(causal), BQ=block, BK=16,
                     BD=_pow2(dim, 16))
    return out, lse


@triton.jit
def _decode(q, kc, vc, table, lens, o, heads, dim, block_size, qk_scale_log2,
            q_b, q_h, q_d, c_n, c_s, c_h, c_d, vc_n, vc_s, vc_h, vc_d, t_b, t_j, o_b, o_h,
            SLOTS: tl.constexpr, BD: tl.constexpr):
    seq = tl.program_id(0)
    h = tl.program_id(1)
    feats = tl.arange(0, BD)
    feat_ok = feats < dim
    qv = tl.load(q + seq * q_b + h * q_h + feats * q_d, mask=feat_ok, other=0.0).to(tl.float32)
    n_tokens = tl.load(lens + seq).to(tl.int32)
    slots = tl.arange(0, SLOTS)
    run_max = float("-inf")
    run_sum = 0.0
    acc = tl.zeros((BD,), tl.float32)
    for logical in range(0, tl.cdiv(n_tokens, block_size)):
        physical = tl.load(table + seq * t_b + logical * t_j).to(tl.int64)
        token = logical * block_size + slots
        live = (slots < block_size) & (token < n_tokens)
        where = physical * c_n + slots[:, None] * c_s + h * c_h + feats[None, :] * c_d
        kt = tl.load(kc + where, mask=live[:, None] & feat_ok[None, :], other=0.0)
        s = tl.sum(kt.to(tl.float32) * qv[None, :], axis=1) * qk_scale_log2
        s = tl.where(live, s, float("-inf"))
        new_max = tl.maximum(run_max, tl.max(s, axis=0))
        p = tl.exp2(s - new_max)
        decay = tl.exp2(run_max - new_max)
        vwhere = physical * vc_n + slots[:, None] * vc_s + h * vc_h + feats[None, :] * vc_d
        vt = tl.load(vc + vwhere, mask=live[:, None] & feat_ok[None, :], other=0.0)
        acc = acc * decay + tl.sum(p[:, None] * vt.to(tl.float32), axis=0)
        run_sum = run_sum * decay + tl.sum(p, axis=0)
        run_max = new_max
    out = acc / run_sum
    tl.store(o + seq * o_b + h * o_h + feats, out.to(o.dtype.element_ty), mask=feat_ok)


def paged_attention_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float | None = None) -> torch.Tensor:
    if q.dim() != 3:
        raise ValueError(f"q must be [batch, heads, dim], got {list(q.shape)}")
    batch, heads, dim = q.shape
    if k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError("k_cache and v_cache must be the same [num_blocks, block_size, heads, "
                         f"dim], got {list(k_cache.shape)} and {list(v_cache.shape)}")
    num_blocks, block_size, cache_heads, cache_dim = k_cache.shape
    if (cache_heads, cache_dim) != (heads, dim) or block_size < 1:
        raise ValueError(f"the caches hold [{cache_heads}, {cache_dim}] per token, q has "
                         f"[{heads}, {dim}]")
    _floating("q", q)
    if q.dtype != k_cache.dtype or q.dtype != v_cache.dtype:
        raise ValueError("q and the caches must share a dtype")
    ints = (torch.int32, torch.int64)
    if block_tables.dim() != 2 or block_tables.shape[0] != batch or block_tables.dtype not in ints:
        raise ValueError(f"block_tables must be int32/int64 [{batch}, max_blocks], got "
                         f"{block_tables.dtype} {list(block_tables.shape)}")
    if context_lens.dim() != 1 or context_lens.shape[0] != batch or context_lens.dtype not in ints:
        raise ValueError(f"context_lens must be int32/int64 [{batch}], got "
                         f"{context_lens.dtype} {list(context_lens.shape)}")
    out = torch.empty((batch, heads, dim), dtype=q.dtype, device=q.device)
    if batch == 0 or heads == 0:
        return out
    shortest, longest = int(context_lens.min()), int(context_lens.max())
    if shortest < 1 or longest > block_tables.shape[1] * block_size:
        raise ValueError(f"context_lens must lie in [1, {block_tables.shape[1] * block_size}], "
                         f"got [{shortest}, {longest}]")
    scale = 1.0 / math.sqrt(dim) if scale is None else float(scale)
    _decode[(batch, heads)](q, k_cache, v_cache, block_tables, context_lens, out, heads, dim,
                            block_size, scale * _LOG2E, *q.stride(), *k_cache.stride(),
                            *v_cache.stride(), *block_tables.stride(), *out.stride()[:2],
                            SLOTS=_pow2(block_size), BD=_pow2(dim))
    return out

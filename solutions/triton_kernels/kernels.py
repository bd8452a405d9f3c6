"""Reference solution: fused softmax, RMSNorm, flash attention and paged-attention decode.

Each public function is a thin wrapper: it checks shapes, allocates the output, picks block
sizes and a launch grid, and launches one `@triton.jit` kernel that does all the arithmetic.
Kernels take strides instead of assuming contiguity, compute in float32 whatever the input
dtype, and use 64-bit offsets for the row/batch part of every address.

Under TRITON_INTERPRET=1 (CPU tensors) the same kernels run in Triton's interpreter.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

__all__ = ["flash_attention", "paged_attention_decode", "rms_norm", "softmax"]

MAX_ROW_BLOCK = 16384  # widest row softmax / rms_norm keep in one block (README §5)
MAX_HEAD_DIM = 256


# -- softmax ---------------------------------------------------------------------------------
@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, stride_x_row, stride_x_col, stride_y_row,
                    BLOCK: tl.constexpr):
    # One program per row; the whole row sits in registers, so x is read once and y written
    # once. Padded columns load as -inf: they add exp(-inf) = 0 to the sum.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x_row + cols * stride_x_col, mask=mask,
                other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)  # exp of the shifted row is at most 1: no overflow
    numerator = tl.exp(x)
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(y_ptr + row * stride_y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Row-wise softmax of a 2-D tensor; see the stub for the contract."""
    _check_rows(x, "softmax")
    n_rows, n_cols = x.shape
    y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    _softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), x.stride(1), y.stride(0),
                               BLOCK=triton.next_power_of_2(n_cols))
    return y


# -- rms_norm --------------------------------------------------------------------------------
@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, stride_x_row, stride_x_col,
                     stride_w, stride_y_row, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x_row + cols * stride_x_col, mask=mask,
                other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols * stride_w, mask=mask, other=0.0).to(tl.float32)
    # Padded columns are 0, so they add nothing; divide by the true width, not BLOCK.
    mean_square = tl.sum(x * x, axis=0) / n_cols
    y = x * tl.rsqrt(mean_square + eps) * w
    tl.store(y_ptr + row * stride_y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim of a 2-D tensor; see the stub for the contract."""
    _check_rows(x, "rms_norm")
    n_rows, n_cols = x.shape
    if weight.dim() != 1 or weight.shape[0] != n_cols:
        raise ValueError(f"rms_norm: weight has shape {tuple(weight.shape)}, expected "
                         f"[{n_cols}] (the width of x)")
    y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    _rms_norm_kernel[(n_rows,)](x, weight, y, n_cols, float(eps), x.stride(0), x.stride(1),
                                weight.stride(0), y.stride(0),
                                BLOCK=triton.next_power_of_2(n_cols))
    return y


def _check_rows(x: torch.Tensor, name: str) -> None:
    if x.dim() != 2:
        raise ValueError(f"{name}: x must be 2-D [rows, cols], got shape {tuple(x.shape)}")
    if x.shape[1] > MAX_ROW_BLOCK:
        raise ValueError(f"{name}: rows of {x.shape[1]} elements are wider than "
                         f"{MAX_ROW_BLOCK}, the widest row kept in one block")


# -- flash attention -------------------------------------------------------------------------
@triton.jit
def _flash_attention_kernel(
        q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, seq_q, seq_k, head_dim, num_heads, scale_log2,
        stride_qb, stride_qh, stride_qs, stride_qd, stride_kb, stride_kh, stride_ks, stride_kd,
        stride_vb, stride_vh, stride_vs, stride_vd, stride_ob, stride_oh, stride_os,
        stride_lb, stride_lh,
        CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_D: tl.constexpr, DOT_PRECISION: tl.constexpr):
    # Program (query block, batch*head). Scores live in the log2 domain: exp2(s * scale *
    # log2 e) = exp(s * scale), and exp2 is the cheaper instruction on GPUs.
    start_m = tl.program_id(0) * BLOCK_M
    batch = tl.program_id(1) // num_heads
    head = tl.program_id(1) % num_heads
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < head_dim
    q_base = q_ptr + batch.to(tl.int64) * stride_qb + head.to(tl.int64) * stride_qh
    k_base = k_ptr + batch.to(tl.int64) * stride_kb + head.to(tl.int64) * stride_kh
    v_base = v_ptr + batch.to(tl.int64) * stride_vb + head.to(tl.int64) * stride_vh
    q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd,
                mask=(offs_m[:, None] < seq_q) & mask_d[None, :], other=0.0)

    m_i = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)  # running max (log2 units)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)  # running sum of exp2(s - m_i)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)  # running sum of p @ v
    # Causal: keys past the last query of this block are masked for every row; skip them.
    end_n = seq_k
    if CAUSAL:
        end_n = tl.minimum(seq_k, start_m + BLOCK_M)
    for start_n in range(0, end_n, BLOCK_N):
        cols = start_n + offs_n
        kv_mask = (cols[:, None] < seq_k) & mask_d[None, :]
        k = tl.load(k_base + cols[:, None] * stride_ks + offs_d[None, :] * stride_kd,
                    mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale_log2
        keep = cols[None, :] < seq_k
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, -float("inf"))
        # Column 0 is kept for every row in the first block, so m_new is finite from then on.
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)  # rescales what was summed under the old max
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + cols[:, None] * stride_vs + offs_d[None, :] * stride_vd,
                    mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    out = acc / l_i[:, None]
    o_base = o_ptr + batch.to(tl.int64) * stride_ob + head.to(tl.int64) * stride_oh
    tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=(offs_m[:, None] < seq_q) & mask_d[None, :])
    # lse = log(sum exp(s * scale)) = ln 2 * (m_i + log2(l_i)), back in natural-log units.
    lse = (m_i + tl.log2(l_i)) * 0.6931471805599453
    lse_base = lse_ptr + batch.to(tl.int64) * stride_lb + head.to(tl.int64) * stride_lh
    tl.store(lse_base + offs_m, lse, mask=offs_m < seq_q)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiled attention with the online softmax; see the stub for the contract."""
    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape:
        raise ValueError(f"flash_attention: q, k, v must be [batch, heads, seq, dim] with k and "
                         f"v alike; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    batch, heads, seq_q, head_dim = q.shape
    seq_k = k.shape[2]
    if k.shape[0] != batch or k.shape[1] != heads or k.shape[3] != head_dim:
        raise ValueError(f"flash_attention: k has shape {tuple(k.shape)}, which does not match "
                         f"q's batch, heads and dim {tuple(q.shape)}")
    if causal and seq_q != seq_k:
        raise ValueError(f"flash_attention: causal needs seq_q == seq_k, got {seq_q} and {seq_k}")
    if seq_k == 0 or not 0 < head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"flash_attention: need seq_k >= 1 and 1 <= dim <= {MAX_HEAD_DIM}")
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads, seq_q), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse
    block_m, block_n = (64, 64) if q.is_cuda else (32, 32)
    grid = (triton.cdiv(seq_q, block_m), batch * heads)
    _flash_attention_kernel[grid](
        q, k, v, out, lse, seq_q, seq_k, head_dim, heads, scale * math.log2(math.e),
        *q.stride(), *k.stride(), *v.stride(), *out.stride()[:3], *lse.stride()[:2],
        CAUSAL=bool(causal), BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
        # float32 inputs: exact products, not TF32 (10-bit mantissa) tensor cores, so a GPU
        # meets float32 tolerances; 16-bit inputs use tensor cores either way.
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32")
    return out, lse


# -- paged-attention decode ------------------------------------------------------------------
@triton.jit
def _paged_decode_kernel(
        q_ptr, k_cache_ptr, v_cache_ptr, tables_ptr, lens_ptr, o_ptr, head_dim, block_size,
        scale, stride_qb, stride_qh, stride_qd, stride_kn, stride_kt, stride_kh, stride_kd,
        stride_vn, stride_vt, stride_vh, stride_vd, stride_tb, stride_tn, stride_ob, stride_oh,
        BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # Program (sequence, head): one query row against the sequence's cached keys, read block
    # by block through the block table, with the online softmax over blocks.
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    offs_t = tl.arange(0, BLOCK_T)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < head_dim
    q = tl.load(q_ptr + seq * stride_qb + head * stride_qh + offs_d * stride_qd, mask=mask_d,
                other=0.0).to(tl.float32)
    context_len = tl.load(lens_ptr + seq)
    m_i = -float("inf")
    l_i = 0.0
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for logical in range(0, tl.cdiv(context_len, block_size)):
        physical = tl.load(tables_ptr + seq * stride_tb + logical * stride_tn).to(tl.int64)
        token_mask = (offs_t < block_size) & (logical * block_size + offs_t < context_len)
        tile_mask = token_mask[:, None] & mask_d[None, :]
        k = tl.load(k_cache_ptr + physical * stride_kn + offs_t[:, None] * stride_kt
                    + head * stride_kh + offs_d[None, :] * stride_kd, mask=tile_mask, other=0.0)
        s = tl.sum(k.to(tl.float32) * q[None, :], axis=1) * scale
        s = tl.where(token_mask, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))  # finite: token 0 of a block is in context
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new)
        v = tl.load(v_cache_ptr + physical * stride_vn + offs_t[:, None] * stride_vt
                    + head * stride_vh + offs_d[None, :] * stride_vd, mask=tile_mask, other=0.0)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    tl.store(o_ptr + seq * stride_ob + head * stride_oh + offs_d,
             (acc / l_i).to(o_ptr.dtype.element_ty), mask=mask_d)


def paged_attention_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float | None = None) -> torch.Tensor:
    """One decode step of attention over a paged KV cache; see the stub for the contract."""
    if q.dim() != 3 or k_cache.dim() != 4 or v_cache.shape != k_cache.shape:
        raise ValueError(f"paged_attention_decode: q must be [batch, heads, dim] and the caches "
                         f"[num_blocks, block_size, heads, dim]; got {tuple(q.shape)}, "
                         f"{tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
    batch, heads, head_dim = q.shape
    block_size = k_cache.shape[1]
    if k_cache.shape[2] != heads or k_cache.shape[3] != head_dim:
        raise ValueError(f"paged_attention_decode: caches hold {k_cache.shape[2]} heads of dim "
                         f"{k_cache.shape[3]}, q has {heads} of dim {head_dim}")
    if block_tables.dim() != 2 or block_tables.shape[0] != batch or \
            tuple(context_lens.shape) != (batch,):
        raise ValueError(f"paged_attention_decode: need block_tables [batch, max_blocks] and "
                         f"context_lens [batch] for batch {batch}")
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    out = torch.empty((batch, heads, head_dim), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    _paged_decode_kernel[(batch, heads)](
        q, k_cache, v_cache, block_tables, context_lens, out, head_dim, block_size, scale,
        *q.stride(), *k_cache.stride(), *v_cache.stride(), *block_tables.stride(),
        *out.stride()[:2],
        BLOCK_T=triton.next_power_of_2(block_size), BLOCK_D=triton.next_power_of_2(head_dim))
    return out

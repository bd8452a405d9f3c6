"""Fused softmax, RMSNorm, flash attention and paged-attention decode in Triton: you write it.

Read assignments/triton_kernels/README.md first. Each public function below is a Python
*wrapper*: it checks shapes, allocates the output(s), computes a launch grid and launches one
or more `@triton.jit` kernels that you write in this file. All arithmetic happens inside the
kernels. The graders run every wrapper under `harness.compute_guard.ComputeGuard`, which fails
a call that computes with torch (`torch.softmax`, `@`, `.exp()`, `+`, `.sum()`, indexing a
float tensor with a tensor, ...). A wrapper may: allocate (`torch.empty`, `torch.empty_like`,
`torch.zeros`, ...), read shapes and strides, make views (`view`, `reshape`, `transpose`,
`.t()`), copy (`.contiguous()`, `.to(dtype)`), do integer bookkeeping on integer tensors
(read integers with `int(t)` or `.item()`), and launch kernels. numpy, `.tolist()`,
`.numpy()`, storages and torch's compilers (`torch.compile`, `torch.jit`, ...) are rejected
before anything runs (README §8).

On a machine without a GPU the tests run your kernels in Triton's interpreter:
`TRITON_INTERPRET=1` in the environment before the kernels are defined, and CPU tensors
(README §6). On a GPU the same code compiles.

Conventions shared by every function:
- Inputs may be non-contiguous: pass strides to your kernels. Inputs are never modified.
- Outputs are new contiguous tensors on the input's device. Floating dtypes float32, float16
  and bfloat16 are accepted; arithmetic is done in float32 inside the kernels and the result
  is stored in the input's dtype (`lse` is always float32).
"""

from __future__ import annotations

import torch
import triton  # noqa: F401 - you will need these for your kernels
import triton.language as tl  # noqa: F401

__all__ = ["flash_attention", "paged_attention_decode", "rms_norm", "softmax"]


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Row-wise softmax over the last dim, numerically stable, in one fused kernel.

    Args:
        x: [rows, cols] floating tensor, any strides, any width `cols` (not only powers of
            two) up to 16384; values may be large (e.g. ±1e4): subtract the row max first.

    Returns:
        y: new [rows, cols] tensor of x's dtype with y[i, j] = exp(x[i, j]) / sum_k
        exp(x[i, k]); every row sums to 1.

    Raises:
        ValueError: x is not 2-D (or rows wider than 16384).

    One program per row: the row is read once and written once (README §3).
    """
    raise NotImplementedError("softmax: see README §3")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm of each row, fused: y = x / sqrt(mean(x**2 over the row) + eps) * weight.

    Args:
        x: [rows, dim] floating tensor, any strides, any `dim` up to 16384.
        weight: [dim] tensor of per-column gains.
        eps: added to the mean square inside the square root (a row of zeros gives zeros).

    Returns:
        y: new [rows, dim] tensor of x's dtype.

    Raises:
        ValueError: x is not 2-D (or rows wider than 16384), or weight is not [dim].

    One program per row reads x once and writes y once (README §3).
    """
    raise NotImplementedError("rms_norm: see README §3")


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention softmax(q k^T * scale) v, tiled over keys with the online softmax.

    Args:
        q: [batch, heads, seq_q, dim]; k, v: [batch, heads, seq_k, dim] (same dtype). `dim`
            is from 1 to 256 and need not be a power of two; seq_q and seq_k are >= 1 and
            need not be multiples of your block sizes.
        causal: query i attends to keys j <= i only (needs seq_q == seq_k), as
            `torch.nn.functional.scaled_dot_product_attention(..., is_causal=True)`.
        scale: multiplies the scores; None means 1 / sqrt(dim).

    Returns:
        (out, lse): out [batch, heads, seq_q, dim] in q's dtype; lse [batch, heads, seq_q]
        float32, the natural-log log-sum-exp of each query's scaled (and masked) scores:
        lse[b, h, i] = log(sum_j exp(scale * q[b, h, i] . k[b, h, j])).

    Raises:
        ValueError: shapes that do not match as above (a `dim` outside 1..256 included), or
            causal with seq_q != seq_k.

    Never materialises the seq_q x seq_k score matrix in memory: each program keeps one block
    of queries and walks over blocks of keys (README §4). Use `tl.dot(...,
    input_precision="ieee")` for float32 inputs so a GPU matches float32 tolerances.
    """
    raise NotImplementedError("flash_attention: see README §4")


def paged_attention_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float | None = None) -> torch.Tensor:
    """One decode step: each sequence's single query attends to its cached keys and values.

    Same contract as paged_kv's `paged_attention`.

    Args:
        q: [batch, heads, dim], the query of the newest token of each sequence.
        k_cache, v_cache: [num_blocks, block_size, heads, dim]; `block_size` is any positive
            int (not only powers of two).
        block_tables: [batch, max_blocks] int32 or int64; row b lists the physical blocks of
            sequence b in logical order: token t of sequence b lives at
            k_cache[block_tables[b, t // block_size], t % block_size]. Entries past the
            sequence's last block are padding (-1) and must never be read.
        context_lens: [batch] int32 or int64, tokens cached for each sequence, >= 1 and at
            most max_blocks * block_size.
        scale: multiplies the scores; None means 1 / sqrt(dim).

    Returns:
        out [batch, heads, dim] in q's dtype: for each (b, h), softmax over the first
        context_lens[b] tokens of scale * q[b, h] . k, applied to their v.

    Raises:
        ValueError: shapes that do not match as above.

    Reads each needed cache block in place through the block table: no gather of the cache
    into a contiguous copy (README §5).
    """
    raise NotImplementedError("paged_attention_decode: see README §5")

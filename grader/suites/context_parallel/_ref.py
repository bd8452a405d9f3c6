"""References of the context_parallel hidden suite, in the parent: every expected value is
computed here in float64 with plain torch (full attention on the gathered sequence, the dense
MLP block), with its tolerance; the seeded draws the inputs come from; and the checks that
compare what the ranks returned.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from grader.compare import Tolerance, assert_close, attention_bound
from grader.seeds import seeded_generator
from grader.suites.context_parallel._ranks import F64


def randn(seed: int, *shape: int, dtype: torch.dtype = F64) -> torch.Tensor:
    return torch.randn(*shape, generator=seeded_generator(seed), dtype=F64).to(dtype)


def full_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                   q_offset: int = 0, k_offset: int = 0, scale: float | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain float64 attention over one key set, with its lse (-inf and zeros for empty rows)."""
    q, k, v = q.to(F64), k.to(F64), v.to(F64)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if causal:
        qp = torch.arange(q.shape[-2]) + q_offset
        kp = torch.arange(k.shape[-2]) + k_offset
        scores = scores.masked_fill(kp[None, :] > qp[:, None], float("-inf"))
    lse = torch.logsumexp(scores, -1)
    seen = torch.isfinite(lse)
    probs = torch.where(seen[..., None], torch.softmax(scores, -1), torch.zeros_like(scores))
    return torch.einsum("bhqk,bhkd->bhqd", probs.nan_to_num(0.0), v), lse


def attention_tol(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dtype: torch.dtype,
                  blocks: int = 1) -> Tolerance:
    """The derived bound of `grader.compare.attention_bound`, from the case's own inputs, with
    one merge per block folded into the key count."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    score_sum = float((q.abs().to(F64) @ k.abs().to(F64).transpose(-1, -2)).max()) * scale
    return attention_bound(dtype, head_dim=q.shape[-1], keys=k.shape[-2] + 4 * blocks,
                           score_sum=score_sum, value_max=float(v.abs().max()))


def shard(t: torch.Tensor, world: int, dim: int = 2) -> list[torch.Tensor]:
    return [c.clone() for c in t.chunk(world, dim=dim)]


def fingerprint_of(t: torch.Tensor) -> float:
    return float(t.reshape(-1)[0])


def grad_of(leaf: torch.Tensor) -> torch.Tensor:
    """`leaf.grad` after a reference's backward, which gives every leaf one."""
    if leaf.grad is None:
        raise RuntimeError("the reference's backward left a leaf without a gradient")
    return leaf.grad


def dense_block(x, ln_w, ln_b, w1, b1, w2, b2):
    h = F.layer_norm(x, x.shape[-1:], ln_w, ln_b, eps=1e-5)
    return x + F.gelu(h @ w1.t() + b1) @ w2.t() + b2



def check(actual: Any, want: torch.Tensor, what: str, *, dtype: torch.dtype | None = None,
          tol: Tolerance | None = None, hint: str = "") -> None:
    assert_close(actual, want, what=what, dtype=dtype, tol=tol, hint=hint,
                 hint_first=bool(hint))


def wire_window(result, rank: int, label: str) -> list:
    """The wire records of `rank` made while its latest mark was `label`."""
    return [w for w in result.wire[rank] if w.label == label]

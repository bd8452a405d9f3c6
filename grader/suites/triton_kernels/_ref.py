"""Parent side of the triton_kernels hidden suite: cases, float64 references, checks.

A `Case` is one call of a kernel wrapper: its inputs (built by the test modules from a fixed
seed), a layout the rank applies before the call (to make inputs non-contiguous), and the
expected output(s), computed here in float64 with plain torch and kept in float64, so the
tolerance (the float32 default of `grader.compare`, or for attention the bound
`attention_bound` derives from the inputs) measures the kernel's rounding alone. Only
`Case.payload()` travels to the rank. `check(case, result)` judges one case and raises
AssertionError with a message whose first line says which call, how far off, and the likely
fix, without the hidden inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from grader.compare import Tolerance, assert_close, attention_bound, softmax_bound
from harness.cases import case_value

OUT_DTYPE = torch.float32  # every wrapper returns float32 (the stubs' docstrings)


@dataclass
class Case:
    """One wrapper call: `function(*args, **kwargs)` with `expected` output(s)."""

    name: str  # what students see, e.g. "softmax on [5, 781] float32"
    function: str
    args: tuple[Any, ...]
    expected: Any  # a tensor, or a tuple of tensors for flash_attention
    kwargs: dict[str, Any] = field(default_factory=dict)
    # "contiguous" | "transposed" (2-D) | "bshd" (attention) | "padded" (floating inputs are
    # views into buffers one larger in every dim, the elements outside the view NaN)
    layout: str = "contiguous"
    hint: str = ""
    tol: tuple[Tolerance, ...] | None = None  # per output; None: float32's default

    def payload(self) -> dict[str, Any]:
        """What the rank needs: no expected values travel to the code under test."""
        return {"function": self.function, "args": self.args, "kwargs": self.kwargs,
                "layout": self.layout}


def check_call(case: Case, result: dict[str, Any]) -> Any:
    """The call's output, after the checks every case shares: it ran, used no torch, and
    launched a Triton kernel when it had an output to fill."""
    out = case_value(result, case.name)
    if result["violations"]:
        raise AssertionError(f"{case.name}: {result['guard_message']}")
    expected = case.expected if isinstance(case.expected, tuple) else (case.expected,)
    if any(t.numel() for t in expected) and not result.get("launches"):
        raise AssertionError(f"{case.name}: the wrapper launched no Triton kernel; all the "
                             f"arithmetic must happen in an @triton.jit kernel it launches")
    return out


def check(case: Case, result: dict[str, Any], *, check_lse: bool = True,
          check_out: bool = True) -> None:
    """Judge one case: ran, no torch compute, value(s) within the float32 tolerance."""
    out = check_call(case, result)
    if case.function == "flash_attention":
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise AssertionError(f"{case.name}: returned {type(out).__name__}, expected the "
                                 f"tuple (out, lse)")
        out_tol, lse_tol = case.tol or (None, None)
        if check_out:
            assert_close(out[0], case.expected[0], what=f"{case.name}: out", hint=case.hint,
                         hint_first=True, dtype=OUT_DTYPE, tol=out_tol)
        if check_lse:
            assert_close(out[1], case.expected[1], what=f"{case.name}: lse",
                         hint_first=True,
                         hint="lse is log(sum_j exp(scaled score)) in natural-log units, "
                              "float32, [batch, heads, seq_q]", dtype=OUT_DTYPE, tol=lse_tol)
        return
    assert_close(out, case.expected, what=case.name, hint=case.hint, hint_first=True,
                 dtype=OUT_DTYPE, tol=case.tol[0] if case.tol else None)


# -- references (float64) ----------------------------------------------------------------------

def softmax_ref(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=-1)


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xd = x.double()
    return xd * torch.rsqrt(xd.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.double()


def softmax_tolerance(x: torch.Tensor) -> tuple[Tolerance]:
    """The float32 softmax bound for rows of `x` ([rows, width]): the spread max − min of a
    row is the largest |x − max| whose rounding the exponent amplifies."""
    spread = float((x.amax(dim=-1) - x.amin(dim=-1)).max()) if x.numel() else 0.0
    return (softmax_bound(OUT_DTYPE, x.shape[-1], spread),)


def paged_tolerances(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     block_tables: torch.Tensor, context_lens: torch.Tensor,
                     scale: float | None = None) -> tuple[Tolerance]:
    """The attention bound of paged decode: every cached key counts (a superset of the
    context's), and the longest context is the number of keys."""
    heads, dim = q.shape[-2:]
    keys = k_cache.reshape(-1, heads, dim).transpose(0, 1)  # [heads, tokens, dim]
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    score_sum = float((q.double().abs().transpose(0, 1) @ keys.double().abs().transpose(-1, -2))
                      .max()) * scale
    longest = int(context_lens.max()) if context_lens.numel() else 1
    return (attention_bound(OUT_DTYPE, head_dim=dim, keys=max(longest, 1), score_sum=score_sum,
                            value_max=float(v_cache.abs().max())),)


def attention_tolerances(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         scale: float | None = None) -> tuple[Tolerance, Tolerance]:
    """(out, lse) tolerances of float32 attention of these inputs ([..., seq, dim] each).

    `attention_bound` needs Σ_d |q_d·k_d|·scale, the largest over (query, key) pairs: the
    size of what each score's rounding errors are relative to, computed exactly here.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    score_sum = float((q.double().abs() @ k.double().abs().transpose(-1, -2)).max()) * scale
    head_dim, keys = q.shape[-1], k.shape[-2]
    return (attention_bound(OUT_DTYPE, head_dim=head_dim, keys=keys, score_sum=score_sum,
                            value_max=float(v.abs().max())),
            attention_bound(OUT_DTYPE, head_dim=head_dim, keys=keys, score_sum=score_sum,
                            value_max=1.0))


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) in float64 from the explicit score matrix."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q.double() @ k.double().transpose(-1, -2) * scale
    if causal:
        seq_q, seq_k = scores.shape[-2:]
        future = torch.ones(seq_q, seq_k, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, -math.inf)
    out = torch.softmax(scores, dim=-1) @ v.double()
    return out, torch.logsumexp(scores, dim=-1)


def paged_ref(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
              block_tables: torch.Tensor, context_lens: torch.Tensor,
              scale: float | None = None) -> torch.Tensor:
    """Gather each sequence's tokens through its block table, then attend (float64)."""
    batch, heads, dim = q.shape
    block_size = k_cache.shape[1]
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    out = torch.empty(batch, heads, dim, dtype=torch.float64)
    for b in range(batch):
        length = int(context_lens[b])
        blocks = block_tables[b, :math.ceil(length / block_size)].long()
        k = k_cache[blocks].reshape(-1, heads, dim)[:length].double()
        v = v_cache[blocks].reshape(-1, heads, dim)[:length].double()
        scores = torch.einsum("hd,thd->ht", q[b].double(), k) * scale
        out[b] = torch.einsum("ht,thd->hd", torch.softmax(scores, dim=-1), v)
    return out



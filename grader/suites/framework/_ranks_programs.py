"""The small programs the framework suite runs: built the same way in the parent (references)
and in the rank (code under test), from tensors the parent draws.

A program is a module-level function of tensors. The parent imports these to compute its
references; they travel to the ranks by value with the rank functions that use them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

Program = Callable[..., torch.Tensor]  # a module-level function of tensors

# ---- FLOP programs: name -> function of the case's tensors (README §2) ------------------------


def p_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def p_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.linear(x, w, bias)


def p_bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bmm(a, b)


def p_baddbmm(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.baddbmm(c, a, b)


def p_conv2d(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.conv2d(x, w, bias, stride=2, padding=1)


def p_conv1d(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.conv1d(x, w, padding=2)


def p_mlp(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
          b2: torch.Tensor) -> torch.Tensor:
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)


def p_cnn(x: torch.Tensor, c1: torch.Tensor, c2: torch.Tensor, w: torch.Tensor,
          b: torch.Tensor) -> torch.Tensor:
    h = F.relu(F.conv2d(x, c1, padding=1))
    h = F.relu(F.conv2d(h, c2, stride=2))
    return F.linear(h.flatten(1), w, b)


def p_attention(x: torch.Tensor, w_qkv: torch.Tensor, w_out: torch.Tensor) -> torch.Tensor:
    """One causal self-attention block written with matmuls, 2 heads: `[b, s, h] -> [b, s, h]`."""
    batch, seq, width = x.shape
    heads = 2
    q, k, v = F.linear(x, w_qkv).split(width, dim=-1)
    q, k, v = (t.reshape(batch, seq, heads, width // heads).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(width // heads)
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    mixed = (probs @ v).transpose(1, 2).reshape(batch, seq, width)
    return F.linear(mixed, w_out)


def p_uncounted(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (torch.exp(x) * y).cumsum(dim=-1) + torch.tanh(x).sum(dim=-1, keepdim=True)


FLOP_PROGRAMS: dict[str, Program] = {
    "mm": p_mm, "linear": p_linear, "bmm": p_bmm, "baddbmm": p_baddbmm, "conv2d": p_conv2d,
    "conv1d": p_conv1d, "mlp": p_mlp, "cnn": p_cnn, "attention": p_attention,
    "uncounted": p_uncounted}

# ---- functions whose saved tensors are measured (README §3.1) ---------------------------------


def s_exp(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(x)


def s_mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * y


def s_views(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x[:, :8] * y[2:, :8].T.contiguous().T


def s_saved_twice(x: torch.Tensor) -> torch.Tensor:
    return x * x + torch.sin(x)


def s_where(x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, x, y)


def s_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.linear(x, w, b)


def s_chain(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return torch.tanh(F.gelu(x @ w1) @ w2).sum()


SAVED_FUNCTIONS: dict[str, Program] = {
    "exp": s_exp, "mul": s_mul, "views": s_views, "saved_twice": s_saved_twice, "where": s_where,
    "linear": s_linear, "chain": s_chain, "no_grad": s_mul}

# ---- functions checkpointed (README §3.2) ------------------------------------------------------


def c_mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, w3: torch.Tensor) -> torch.Tensor:
    return torch.tanh(F.gelu(x @ w1) @ w2) @ w3


def c_gated(x: torch.Tensor, w: torch.Tensor, unused: torch.Tensor) -> torch.Tensor:
    h = x @ w
    return torch.sigmoid(h) * h.exp().clamp(max=10.0)


CHECKPOINTED: dict[str, Program] = {"mlp": c_mlp, "gated": c_gated}

# ---- FX graphs (README §5): each with the node kinds the rewritten graph must have ------------


def fx_silu_forms(x: torch.Tensor) -> torch.Tensor:
    a = x * torch.sigmoid(x)
    b = torch.sigmoid(a) * a
    c = torch.mul(b, b.sigmoid())
    return c.mul(torch.sigmoid(c))


def fx_add_relu_forms(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    c = torch.relu(a + b)
    d = F.relu(torch.add(c, b))
    e = (d.add(a)).relu()
    return torch.relu(b + e)


def fx_shared(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(x)
    kept = x * s + s  # the sigmoid has a second user
    t = x + y
    also_kept = torch.relu(t) * t  # the add has a second user
    other = x * torch.sigmoid(y)  # not the same operand
    scaled = torch.relu(torch.add(x, y, alpha=2.0))  # an add with a keyword
    in_place = F.relu(y + x, inplace=True)  # a relu in place
    not_a_mul = x.add(torch.sigmoid(x))  # an add of x and its sigmoid
    not_a_relu = (x + y).tanh()  # another method on an add
    return kept + also_kept + other + scaled + in_place + not_a_mul + not_a_relu


def fx_mixed(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    gated = x * torch.sigmoid(x)
    fused = torch.relu(gated + y)
    s = torch.sigmoid(y)
    shared = y * s
    return fused + shared + torch.relu(s + x) + y * 2.0


FX_FUNCTIONS: dict[str, Program] = {
    "silu_forms": fx_silu_forms, "add_relu_forms": fx_add_relu_forms, "shared": fx_shared,
    "mixed": fx_mixed}

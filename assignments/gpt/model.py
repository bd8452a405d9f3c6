"""A Llama-style GPT from its parts, and RMSNorm's backward by hand: what you write (README §5-8).

Conventions for every function and module here:
- Shapes: activations are [batch, seq, dim]; attention works per head on
  [batch, heads, seq, head_dim]. Any input may be non-contiguous (a transposed or sliced view);
  results must not depend on the layout.
- Dtypes: results have the dtype of the main input, and float64 in gives float64 out, computed in
  float64 (the tests compare float64 results with a float64 reference at float64 tolerance).
  Reductions and softmax of float16/bfloat16 inputs are computed in float32.
- Nothing is modified in place: inputs are read-only.
- Forbidden (the test fails even if you catch the error): `F.scaled_dot_product_attention`,
  `nn.MultiheadAttention` (and `F.multi_head_attention_forward`), `F.rms_norm` and
  `nn.RMSNorm`. Write these from matmuls, softmax and elementwise ops.

The model's sizes come from `assignments.gpt.config.GPTConfig` (provided). Train it with
`python -m assignments.gpt.train` (provided).
"""

from __future__ import annotations

import torch
from torch import nn

from assignments.gpt.config import GPTConfig

# ---- RMSNorm (README §5.1) ----------------------------------------------------------------------


class RMSNorm(nn.Module):
    """Root-mean-square layer norm: `y = x * rsqrt(mean(x**2, -1) + eps) * weight`.

    Args:
        dim: size of the last dimension of the inputs (the one normalised).
        eps: added to the mean square inside the square root.

    Attributes:
        weight: nn.Parameter of shape [dim], initialised to ones (the only parameter; no bias).
        eps: the float given.

    forward(x): x is [..., dim] of any floating dtype. The statistic and the product with
    `weight` are computed in float32 for float16/bfloat16 inputs (in x's dtype for float32 and
    float64) and the result is cast back to x's dtype. Differentiable with plain autograd.
    """

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        raise NotImplementedError("RMSNorm: see README §5.1")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("RMSNorm: see README §5.1")


class RMSNormFunction(torch.autograd.Function):
    """RMSNorm as an autograd Function with a hand-written backward (README §8).

    Usage: `y = RMSNormFunction.apply(x, weight, eps)`, the same value as RMSNorm (x is
    [..., dim], weight [dim], eps a float).

    forward saves, with `ctx.save_for_backward`, exactly three tensors and nothing else:
        - the input `x` itself (not a copy in another dtype; a contiguous copy is allowed),
        - `weight`,
        - `rstd`, the per-row reciprocal RMS `1 / sqrt(mean(x**2, -1) + eps)`: one number per
          row, shape x.shape[:-1] or x.shape[:-1] + (1,), in the computation dtype (float32
          for float16/bfloat16 inputs, else x's dtype).
    It must not save the normalised output `x * rstd` or the result: that is a second tensor
    of x's size kept alive until backward (the point of §8). eps may be kept on ctx.

    backward returns (grad_x, grad_weight, None): grad_x of x's shape and dtype, grad_weight of
    weight's shape and dtype (summed over every row). It must pass
    `torch.autograd.gradcheck` in float64 (computed from the saved tensors, no autograd inside).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        raise NotImplementedError("RMSNormFunction: see README §8")

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        raise NotImplementedError("RMSNormFunction: see README §8")


# ---- rotary position embedding (README §5.2) -----------------------------------------------------


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Rotate pairs across the two halves of the last dimension (the GPT-NeoX / Llama layout).

    With the last dimension split into halves x1 = x[..., :d/2] and x2 = x[..., d/2:], returns
    cat(-x2, x1) along the last dimension: [1, 2, 3, 4] -> [-3, -4, 1, 2]. Element i is paired
    with element i + d/2, not with its neighbour (that is the interleaved GPT-J layout).

    Args:
        x: [..., d] with d even.

    Returns:
        A new tensor of x's shape and dtype.
    """
    raise NotImplementedError("rotate_half: see README §5.2")


def rope_cache(seq_len: int, head_dim: int, base: float = 10000.0,
               dtype: torch.dtype = torch.float32,
               device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The cos and sin tables of rotary embeddings for positions 0 .. seq_len - 1.

    Frequency i (i = 0 .. head_dim/2 - 1) is inv_freq[i] = base ** (-2i / head_dim); the angle
    of position p and column j is p * inv_freq[j mod head_dim/2] (the frequencies repeated
    twice, to match rotate_half's halves). Angles are computed in float64 and the tables cast to
    `dtype` at the end (positions times frequencies lose digits in float32 at long contexts).

    Returns:
        (cos, sin), each [seq_len, head_dim] of `dtype` on `device`.
    """
    raise NotImplementedError("rope_cache: see README §5.2")


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         positions: torch.Tensor | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate queries and keys by their positions: `x * cos[p] + rotate_half(x) * sin[p]`.

    Args:
        q: [batch, n_heads, seq, head_dim]; k: [batch, n_kv_heads, seq, head_dim] (the head
            counts may differ).
        cos, sin: [max_len, head_dim] tables from rope_cache (any floating dtype; they are
            used in q's dtype).
        positions: the position of each of the `seq` tokens: a torch.long tensor [seq] (the
            same for every batch row) or [batch, seq]; None means 0 .. seq - 1. Every position
            is < max_len.

    Returns:
        (q_rotated, k_rotated): new tensors, with q's and k's shapes and dtypes.
    """
    raise NotImplementedError("apply_rotary_pos_emb: see README §5.2")


# ---- SwiGLU MLP (README §5.3) -------------------------------------------------------------------


class SwiGLU(nn.Module):
    """The gated MLP of Llama: `down(silu(gate(x)) * up(x))`.

    Args:
        dim: width of the input and the output.
        hidden_dim: width of the gate and up projections.

    Attributes (bias-free nn.Linear each; tests load weights by these names):
        gate: dim -> hidden_dim;  up: dim -> hidden_dim;  down: hidden_dim -> dim.

    forward(x): x is [..., dim]; returns [..., dim] in x's dtype.
    """

    def __init__(self, dim: int, hidden_dim: int) -> None:
        raise NotImplementedError("SwiGLU: see README §5.3")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("SwiGLU: see README §5.3")


# ---- attention (README §5.4) --------------------------------------------------------------------


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              causal: bool = True) -> torch.Tensor:
    """Scaled dot-product attention with grouped-query heads: softmax(q kᵀ / sqrt(d)) v.

    Args:
        q: [batch, n_heads, seq_q, head_dim].
        k, v: [batch, n_kv_heads, seq_k, head_dim], with n_heads a multiple of n_kv_heads.
            Query head h uses key/value head h // (n_heads // n_kv_heads): consecutive query
            heads share a K/V head (as `k.repeat_interleave(group, dim=1)` would lay them out).
        causal: if True, the seq_q queries are the *last* seq_q positions of the seq_k keys:
            query i sits at position seq_k - seq_q + i and attends to keys 0 .. that position
            (its own included). With seq_q == seq_k that is the usual lower-triangular mask; with
            seq_q == 1 the query sees every key (a decode step). Requires seq_q <= seq_k.
            If False, every query attends to every key.

    Returns:
        [batch, n_heads, seq_q, head_dim] in q's dtype (the softmax in float32 for
        float16/bfloat16 inputs).

    Raises:
        ValueError: if n_heads is not a multiple of n_kv_heads, if k and v differ in shape, or
            if causal and seq_q > seq_k.

    Not allowed: F.scaled_dot_product_attention, nn.MultiheadAttention.
    """
    raise NotImplementedError("attention: see README §5.4")


# ---- the model (README §6-7) ------------------------------------------------------------------


class CausalSelfAttention(nn.Module):
    """Multi-head (or grouped-query) causal self-attention with RoPE (README §6).

    Attributes (bias-free nn.Linear each): wq: dim -> n_heads*head_dim; wk, wv: dim ->
    n_kv_heads*head_dim; wo: n_heads*head_dim -> dim (a residual output projection).

    forward(x, cos, sin, positions=None, kv_cache=None): x is [batch, seq, dim]; cos/sin are
    the model's RoPE tables; positions as in apply_rotary_pos_emb. `kv_cache` is a dict
    of your design (README §7), or None; the tests only call GPT.
    """

    def __init__(self, config: GPTConfig) -> None:
        raise NotImplementedError("CausalSelfAttention: see README §6")

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                positions: torch.Tensor | None = None, kv_cache: dict | None = None
                ) -> torch.Tensor:
        raise NotImplementedError("CausalSelfAttention: see README §6")


class Block(nn.Module):
    """A pre-norm transformer block (README §6):
    `h = x + attn(attn_norm(x)); out = h + mlp(mlp_norm(h))`.

    Attributes: attn_norm (RMSNorm), attn (CausalSelfAttention), mlp_norm (RMSNorm),
    mlp (SwiGLU of width config.hidden_dim).
    """

    def __init__(self, config: GPTConfig) -> None:
        raise NotImplementedError("Block: see README §6")

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                positions: torch.Tensor | None = None, kv_cache: dict | None = None
                ) -> torch.Tensor:
        raise NotImplementedError("Block: see README §6")


class GPT(nn.Module):
    """A decoder-only transformer: embedding, n_layers pre-norm blocks, final RMSNorm, and an
    output head tied to the embedding (README §6).

    Parameters, by `state_dict()` name (tests load and read weights by these names; no biases;
    the RoPE tables, if kept, are non-persistent buffers):
        tok_emb.weight                     [vocab_size, dim]
        blocks.{i}.attn_norm.weight        [dim]
        blocks.{i}.attn.wq.weight          [n_heads * head_dim, dim]
        blocks.{i}.attn.wk.weight          [kv_heads * head_dim, dim]
        blocks.{i}.attn.wv.weight          [kv_heads * head_dim, dim]
        blocks.{i}.attn.wo.weight          [dim, n_heads * head_dim]
        blocks.{i}.mlp_norm.weight         [dim]
        blocks.{i}.mlp.gate.weight         [hidden_dim, dim]
        blocks.{i}.mlp.up.weight           [hidden_dim, dim]
        blocks.{i}.mlp.down.weight         [dim, hidden_dim]
        norm.weight                        [dim]
        lm_head.weight                     the same nn.Parameter as tok_emb.weight (tied)

    `__init__` calls `init_weights()`. RMSNorm eps is config.norm_eps; RoPE uses
    config.rope_base and tables of config.max_seq_len positions. The tests convert the model
    with `.to(torch.float64)` (or float32) before loading weights: after that it must compute
    in that dtype end to end (keep the RoPE tables in float64, or rebuild them in the
    activations' dtype; a float32 table cast to float64 keeps float32's error).
    """

    def __init__(self, config: GPTConfig) -> None:
        raise NotImplementedError("GPT: see README §6")

    def init_weights(self) -> None:
        """Re-initialise every parameter in place, drawing from torch's global generator:
        every Linear and the embedding (hence the tied head) ~ normal(0, 0.02), except the
        residual output projections (attn.wo and mlp.down of every block) ~ normal(0,
        0.02 / sqrt(2 * n_layers)) (GPT-2's scaling: the residual stream sums 2·n_layers of
        them); RMSNorm weights = 1. The head stays tied afterwards."""
        raise NotImplementedError("GPT.init_weights: see README §6")

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits of the next token at every position, and the loss if targets are given.

        Args:
            idx: torch.long [batch, seq], tokens in [0, vocab_size), 1 <= seq <= max_seq_len.
            targets: torch.long [batch, seq] or None; entries equal to -1 are ignored.

        Returns:
            (logits [batch, seq, vocab_size] in the model's parameter dtype, loss): loss is
            the mean cross-entropy over the targets that are not -1 (a 0-dim tensor), or None
            without targets. Position t's logits depend only on idx[:, :t+1] (causal).

        Raises:
            ValueError: if seq > config.max_seq_len.
        """
        raise NotImplementedError("GPT.forward: see README §6")

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None, generator: torch.Generator | None = None,
                 use_cache: bool = True) -> torch.Tensor:
        """Extend `idx` by `max_new_tokens` tokens, one at a time (README §7).

        Each step takes the logits of the last position and picks the next token:
        - temperature == 0: greedy, `argmax` over the vocabulary (ties: the lowest index);
        - else: `logits / temperature`; if top_k is given, every logit below the top_k-th
          largest of its row is set to -inf; `probs = softmax(logits, -1)`; the token is
          `torch.multinomial(probs, 1, generator=generator)` — exactly one multinomial call per
          step, on the whole batch, so a seeded generator gives reproducible samples.

        use_cache=True runs the prompt once and then feeds only the new token each step, with
        the keys and values of earlier positions kept in a per-layer cache and RoPE at the new
        token's true position; use_cache=False recomputes forward() over the whole sequence each
        step. Both give the same tokens (up to floating-point ties).

        Args:
            idx: torch.long [batch, seq] prompt, seq >= 1.
            max_new_tokens: >= 0; seq + max_new_tokens <= config.max_seq_len.

        Returns:
            torch.long [batch, seq + max_new_tokens]: the prompt followed by the new tokens.
            The model's training/eval mode is left as it was.

        Raises:
            ValueError: if seq + max_new_tokens > config.max_seq_len.
        """
        raise NotImplementedError("GPT.generate: see README §7")

"""Public tests of gpt (20 points): run `pytest assignments/gpt`.

A rank process imports your model.py and calls each part on small inputs built here; this
process computes the expected values with plain torch in float64 and compares. Each call fails
on its own, so a part you have not written yet costs only its own tests. The hidden suite checks
the same parts on odd shapes, non-contiguous inputs and float32/bfloat16, checks properties
(RoPE depends on distances only, causality, grouped heads), the initialisation, sampling with
the KV cache, the tensors your backward saves, the forbidden calls, and trains the model
(README §10).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from grader.compare import assert_close
from harness.cases import case_value, run_cases

F64 = torch.float64


# -- rank side ----------------------------------------------------------------------------------
def rank_calls(ctx: Any, calls: dict[str, dict]) -> dict[str, dict]:
    """Runs in the rank: every call in its own error scope (harness.cases)."""
    from assignments.gpt.config import GPTConfig

    model = ctx.impl_module("gpt", "model")

    def call(spec: dict) -> Any:
        kind = spec["kind"]
        if kind == "fn":
            return getattr(model, spec["fn"])(*spec["args"])
        if kind == "module":
            module = getattr(model, spec["fn"])(*spec["init"]).double()
            module.load_state_dict(spec["state"])
            return module(*spec["args"])
        if kind == "saved":  # RMSNormFunction: what forward saves, and gradcheck
            x, w = (a.clone().requires_grad_(True) for a in spec["args"])
            saved = []
            with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t,
                                                          lambda t: t):
                model.RMSNormFunction.apply(x, w, 1e-5)
            ok = torch.autograd.gradcheck(lambda a, b: model.RMSNormFunction.apply(a, b, 1e-5),
                                          (x, w), raise_exception=False)
            return {"saved": [list(t.shape) for t in saved], "gradcheck": bool(ok)}
        torch.manual_seed(0)
        gpt = model.GPT(GPTConfig(**spec["config"])).double()
        if kind == "gpt":
            logits, loss = gpt(spec["idx"])
            return {"logits": logits, "loss": loss,
                    "tied": gpt.lm_head.weight is gpt.tok_emb.weight}
        return {"cache": gpt.generate(spec["idx"], 8, temperature=0.0),  # kind "generate"
                "full": gpt.generate(spec["idx"], 8, temperature=0.0, use_cache=False)}

    return run_cases(ctx, [(key, lambda spec=spec: call(spec)) for key, spec in calls.items()])


# -- parent side ----------------------------------------------------------------------------------
def fn(name: str, *args: Any) -> dict:
    return {"kind": "fn", "fn": name, "args": list(args)}


GEN = torch.Generator().manual_seed(2026)
X = torch.randn(2, 3, 8, generator=GEN, dtype=F64)
W = 1 + 0.5 * torch.randn(8, generator=GEN, dtype=F64)
Q, K, V = (torch.randn(1, 2, 5, 4, generator=GEN, dtype=F64) for _ in range(3))
GK, GV = (torch.randn(1, 1, 5, 4, generator=GEN, dtype=F64) for _ in range(2))
DQ = torch.randn(1, 2, 2, 4, generator=GEN, dtype=F64)  # 2 queries over 5 keys
GATE, UP = (torch.randn(6, 8, generator=GEN, dtype=F64) * 0.5 for _ in range(2))
DOWN = torch.randn(8, 6, generator=GEN, dtype=F64) * 0.5
CONFIG = dict(vocab_size=20, dim=16, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=16)
IDX = torch.tensor([[1, 5, 7, 3], [2, 2, 9, 0]])

APPLY_BASE = 1000.0


def build() -> dict[str, dict]:
    return {
        "rotate": fn("rotate_half", torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=F64)),
        "cache": fn("rope_cache", 6, 4, 100.0, F64),
        # Tables of another base than the cache's: the rank is never handed the cache it
        # must build (ranks get inputs, never answers: grader/leakcheck.py).
        "apply": fn("apply_rotary_pos_emb", Q, K, *ref_tables(8, 4, APPLY_BASE),
                    torch.tensor([0, 2, 4, 6, 7])),
        "norm": {"kind": "module", "fn": "RMSNorm", "init": (8,), "state": {"weight": W},
                 "args": [X]},
        "swiglu": {"kind": "module", "fn": "SwiGLU", "init": (8, 6), "args": [X],
                   "state": {"gate.weight": GATE, "up.weight": UP, "down.weight": DOWN}},
        "causal": fn("attention", Q, K, V, True),
        "gqa": fn("attention", Q, GK, GV, True),
        "decode": fn("attention", DQ, K, V, True),
        "saved": {"kind": "saved", "args": [X, W]},
        "gpt": {"kind": "gpt", "config": CONFIG, "idx": IDX},
        "generate": {"kind": "generate", "config": CONFIG, "idx": IDX},
    }


WHAT = {"rotate": "rotate_half", "cache": "rope_cache", "apply": "apply_rotary_pos_emb",
        "norm": "RMSNorm", "swiglu": "SwiGLU", "causal": "attention", "gqa": "attention",
        "decode": "attention", "saved": "RMSNormFunction", "gpt": "GPT", "generate": "GPT"}


@pytest.fixture(scope="module")
def calls(launch):
    return launch(rank_calls, world_size=1, args=(build(),), timeout=120).values[0]


def got(calls: dict, key: str) -> Any:
    """The call's value; a failed call re-raises here ("not implemented yet: <name>")."""
    return case_value(calls[key], WHAT[key])


def close(actual: Any, expected: torch.Tensor, what: str, hint: str = "",
          slips: tuple[tuple[torch.Tensor, str], ...] = ()) -> None:
    """Compare at float64 tolerance; a wrong result that matches a known mistake (`slips`)
    gets that mistake's message first."""
    for value, message in slips:
        if isinstance(actual, torch.Tensor) and actual.shape == value.shape \
                and torch.allclose(actual.to(F64), value, rtol=1e-6, atol=1e-8, equal_nan=True) \
                and not torch.allclose(value, expected, rtol=1e-6, atol=1e-8, equal_nan=True):
            hint = message
            break
    assert_close(actual, expected, what=what, dtype=F64, hint=hint, hint_first=True)


# -- references (float64) -----------------------------------------------------------------------
def ref_tables(length: int, dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv = base ** (-torch.arange(0, dim, 2, dtype=F64) / dim)
    angles = torch.arange(length, dtype=F64)[:, None] * inv
    angles = torch.cat((angles, angles), -1)
    return angles.cos(), angles.sin()


def ref_rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


def ref_attention(q, k, v, causal=True, repeat="interleave", diagonal=0, scale=None):
    group = q.shape[1] // k.shape[1]
    if repeat == "interleave":
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    else:
        k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
    sq, sk = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-1, -2) * (scale or 1 / math.sqrt(q.shape[-1]))
    if causal:
        keep = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq + diagonal)
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v


# -- tests ----------------------------------------------------------------------------------------
@pytest.mark.points(2)
@pytest.mark.exercises("rotate_half")
def test_rotate_half_example(calls):
    interleaved = torch.tensor([-2.0, 1.0, -4.0, 3.0], dtype=F64)
    close(got(calls, "rotate"), torch.tensor([-3.0, -4.0, 1.0, 2.0], dtype=F64),
          "rotate_half([1, 2, 3, 4])", "it must be [-3, -4, 1, 2] (README §5.2)",
          slips=((interleaved, "pair element i with i + d/2 (the two halves), not with its "
                  "neighbour (GPT-J's interleaved layout) (README §5.2)"),))


@pytest.mark.points(2)
@pytest.mark.exercises("rope_cache")
def test_rope_cache_small(calls):
    value = got(calls, "cache")
    assert isinstance(value, (list, tuple)) and len(value) == 2, "rope_cache returns (cos, sin)"
    cos, sin = ref_tables(6, 4, 100.0)
    hint = "angle[p, j] = p * base ** (-2 (j mod d/2) / d), in float64 (README §5.2)"
    close(value[0], cos, "cos of rope_cache(6, 4, 100.0)", hint)
    close(value[1], sin, "sin of rope_cache(6, 4, 100.0)", hint)


@pytest.mark.points(2)
@pytest.mark.exercises("apply_rotary_pos_emb")
def test_apply_rotary_pos_emb_at_positions(calls):
    value = got(calls, "apply")
    assert isinstance(value, (list, tuple)) and len(value) == 2, \
        "apply_rotary_pos_emb returns (q_rotated, k_rotated)"
    cos, sin = ref_tables(8, 4, APPLY_BASE)
    pos = torch.tensor([0, 2, 4, 6, 7])
    for name, x, out in (("q", Q, value[0]), ("k", K, value[1])):
        close(out, x * cos[pos] + ref_rotate_half(x) * sin[pos],
              f"{name} rotated at positions [0, 2, 4, 6, 7]",
              "x * cos[positions] + rotate_half(x) * sin[positions] (README §5.2)")


@pytest.mark.points(2)
@pytest.mark.exercises("RMSNorm")
def test_rms_norm_small(calls):
    ms = (X * X).mean(-1, keepdim=True)
    close(got(calls, "norm"), X / torch.sqrt(ms + 1e-5) * W, "RMSNorm(8) on [2, 3, 8]",
          "x * rsqrt(mean(x**2, -1) + eps) * weight (README §5.1)",
          slips=((X / (torch.sqrt(ms) + 1e-5) * W,
                  "eps goes inside the square root: rsqrt(mean(x**2) + eps) (README §5.1)"),))


@pytest.mark.points(2)
@pytest.mark.exercises("SwiGLU")
def test_swiglu_small(calls):
    g = X @ GATE.T
    close(got(calls, "swiglu"), (g * torch.sigmoid(g) * (X @ UP.T)) @ DOWN.T,
          "SwiGLU(8, 6) on [2, 3, 8]", "down(silu(gate(x)) * up(x)) (README §5.3)")


@pytest.mark.points(3)
@pytest.mark.exercises("attention")
def test_attention_causal_grouped_and_decode(calls):
    d = Q.shape[-1]
    close(got(calls, "causal"), ref_attention(Q, K, V), "causal attention, 2 heads, seq 5",
          "softmax(q kᵀ / sqrt(d) + causal mask) v (README §5.4)",
          slips=((ref_attention(Q, K, V, diagonal=-1), "the causal mask must keep the "
                  "diagonal: a query sees its own key (README §5.4)"),
                 (ref_attention(Q, K, V, scale=1 / d), "scale the scores by 1/sqrt(head_dim), "
                  "not 1/head_dim (README §5.4)")))
    close(got(calls, "gqa"), ref_attention(Q, GK, GV), "attention, 2 query heads over 1 K/V "
          "head", "every query head of a group reads the same K/V head (README §5.4)")
    close(got(calls, "decode"), ref_attention(DQ, K, V), "causal attention, 2 queries over 5 "
          "keys", "the queries are the last seq_q positions: tril(diagonal=seq_k - seq_q)",
          slips=((ref_attention(DQ, K, V, diagonal=-(5 - 2)), "with fewer queries than keys, "
                  "the queries are the last seq_q positions: tril(diagonal=seq_k - seq_q) "
                  "(README §5.4)"),))


@pytest.mark.points(3)
@pytest.mark.exercises("RMSNormFunction")
def test_rms_norm_function_gradcheck_and_saved(calls):
    value = got(calls, "saved")
    assert value["gradcheck"], ("RMSNormFunction fails gradcheck in float64: check "
                                "grad_x = rstd * (g*w - xhat * mean(g*w*xhat, -1)) (README §8)")
    shapes = value["saved"]
    full = [s for s in shapes if s == list(X.shape)]
    assert len(shapes) == 3 and len(full) == 1, (
        f"RMSNormFunction saved {len(shapes)} tensors {shapes}: save exactly x, weight and the "
        f"per-row rstd, never the normalised output (README §8)")


@pytest.mark.points(2)
@pytest.mark.exercises("GPT")
def test_gpt_forward_shapes_and_tied_head(calls):
    value = got(calls, "gpt")
    logits = value["logits"]
    assert isinstance(logits, torch.Tensor) and list(logits.shape) == [2, 4, 20], (
        f"GPT(idx [2, 4]) logits must be [2, 4, vocab_size=20], got "
        f"{getattr(logits, 'shape', None)}")
    assert value["loss"] is None, "GPT(idx) without targets returns (logits, None)"
    assert value["tied"], ("the head must be tied: lm_head.weight the same Parameter as "
                           "tok_emb.weight (README §6)")


@pytest.mark.points(2)
@pytest.mark.exercises("GPT")
def test_generate_with_cache_equals_without(calls):
    value = got(calls, "generate")
    cache, full = value["cache"], value["full"]
    assert list(full.shape) == [2, 12], f"generate(idx [2, 4], 8) gives [2, 12], got {full.shape}"
    assert torch.equal(cache, full), (
        f"greedy generate with the KV cache {cache[:, 4:].tolist()} differs from use_cache=False "
        f"{full[:, 4:].tolist()}: feed only the new token, at its true position (README §7)")

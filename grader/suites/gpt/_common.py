"""Parent side of the gpt hidden suite: probes, independent float64 references, comparisons.

Each test module builds a dict of probes (`probe`, `gpt_probe`) with inputs made here, runs them
all in one rank launch (`run_probes`, in a module-scoped fixture) and compares what comes back
with references computed here in float64 with plain torch, written independently of the
solution (RoPE as explicit 2-D rotations of pairs, attention with an explicit head map).

`result` first fails a probe whose code made a forbidden call (recorded in the rank by
`_ranks.Watch`, also when the code caught the error), then re-raises a failed probe the way the
harness does ("not implemented yet: <name>" for a stub), then hands back its value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from grader.compare import Tolerance, assert_close, bound, tolerance
from grader.seeds import seeded_generator
from grader.suites.gpt._ranks import rank_probes
from harness.cases import Memo, case_value
from harness.launcher import preload

# The training test's ranks build an AdamW, and torch.optim imports torch._dynamo on first use:
# seconds per rank unless the forkserver has it.
preload("torch._dynamo")

F64 = torch.float64
F32 = torch.float32
PROBE_TIMEOUT = 120.0
SHARED_TIMEOUT = 240.0  # every unit probe of the suite, on a loaded 2-core machine


def probe(fn: str, *args: Any, kind: str = "call", grad: Sequence[int] = (),
          weights: torch.Tensor | None = None, dtype: torch.dtype | None = None,
          layout: str = "contiguous", init: Sequence[Any] = (),
          state: dict[str, torch.Tensor] | None = None, **kwargs: Any) -> dict[str, Any]:
    """A call of model.<fn> (kind "call"), of a module model.<fn>(*init) loaded with `state`
    (kind "module"), or of an autograd Function's apply (kind "apply")."""
    return {"kind": kind, "fn": fn, "args": list(args), "kwargs": kwargs, "grad": list(grad),
            "weights": weights, "dtype": dtype, "layout": layout, "init": list(init),
            "state": state}


def special(kind: str, **fields: Any) -> dict[str, Any]:
    """A probe handled by one of `_ranks.RANK_KINDS` (GPT, saved tensors, gradcheck, ...)."""
    return {"kind": kind, "grad": [], **fields}


def run_probes(launch: Any, probes: dict[str, dict], timeout: float = PROBE_TIMEOUT
               ) -> dict[str, Any]:
    return launch(rank_probes, world_size=1, args=(probes,), timeout=timeout).values[0]


# Every unit-test module registers its probes at import (collection), and the first module
# fixture of an implementation runs all of them in ONE launch (harness.cases.Memo, keyed by the
# implementation, so a multi-implementation session launches once per implementation). Each
# module then reads its own probes, keys prefixed with its tag.
_REGISTERED: dict[str, dict[str, dict]] = {}
_SHARED = Memo()


def register(tag: str, probes: dict[str, dict]) -> str:
    _REGISTERED[tag] = probes
    return tag


def shared_probes(launch: Any, impl: Any, tag: str) -> dict[str, Any]:
    """The results of module `tag`'s probes, from the one launch of every registered probe."""
    def run_all() -> dict[str, Any]:
        every = {f"{t}/{key}": spec for t, probes in _REGISTERED.items()
                 for key, spec in probes.items()}
        return run_probes(launch, every, timeout=SHARED_TIMEOUT)

    everything = _SHARED.get(("probes", impl, tuple(_REGISTERED)), run_all)
    prefix = tag + "/"
    return {part: {key[len(prefix):]: value for key, value in everything[part].items()
                   if key.startswith(prefix)} for part in ("outcomes", "forbidden")}


FORBIDDEN_HINT = ("write it from matmuls, softmax and elementwise ops (README §5); the call "
                  "counts even when its error is caught")


def result(results: dict[str, Any], key: str, what: str) -> Any:
    """The probe's value; a forbidden call, a stub or a crash fails the test here."""
    seen = results["forbidden"].get(key) or []
    if seen:
        raise AssertionError(f"{what} called {seen[0]}, which is forbidden here; "
                             f"{FORBIDDEN_HINT}")
    return case_value(results["outcomes"][key], what)


def error_type(results: dict[str, Any], key: str, what: str) -> str | None:
    """The type name of the exception the probe raised, None if it returned; a stub or a
    forbidden call fails the test."""
    seen = results["forbidden"].get(key) or []
    if seen:
        raise AssertionError(f"{what} called {seen[0]}, which is forbidden here; "
                             f"{FORBIDDEN_HINT}")
    outcome = results["outcomes"][key]
    if outcome.get("ok"):
        return None
    error = outcome.get("error") or {}
    if error.get("not_implemented"):
        case_value(outcome, what)
    return str(error.get("type"))


def said(*, hint: str) -> str:
    """`hint`, marked as text for students (grader/session/reasons.py keeps hint= strings)."""
    return hint


def close(actual: Any, expected: torch.Tensor, what: str, *, dtype: torch.dtype,
          hint: str = "", tol: Tolerance | None = None,
          slips: Sequence[tuple[torch.Tensor, str]] = ()) -> None:
    """assert_close against a float64 reference, `dtype` being what the student returns.

    `slips`: (what a known mistake returns, what to tell its author). When `actual` is wrong
    and matches a slip, that message leads the first line."""
    try:
        assert_close(actual, expected, what=what, dtype=dtype, tol=tol, hint=hint)
        return
    except AssertionError:
        cause = matching_slip(actual, slips)
        if cause is None:
            raise
    assert_close(actual, expected, what=what, dtype=dtype, tol=tol, hint=cause, hint_first=True)


def matching_slip(actual: Any, slips: Sequence[tuple[torch.Tensor, str]]) -> str | None:
    if not isinstance(actual, torch.Tensor):
        return None
    a = actual.detach().to(F64)
    for value, message in slips:
        v = value.to(F64)
        if v.shape == a.shape and bool(torch.allclose(a, v, rtol=1e-3, atol=1e-4,
                                                      equal_nan=True)):
            return message
    return None


def grad_value(got: dict[str, Any], index: int, what: str) -> torch.Tensor:
    grad = got["grads"][index]
    if isinstance(grad, str):
        raise AssertionError(f"{what}: the input got no gradient ({grad}); compute the result "
                             f"from the inputs with differentiable torch operations")
    return grad


# ---- inputs -------------------------------------------------------------------------------------

def randn(seed: int, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=seeded_generator(seed), dtype=F64) * scale


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


# ---- the model --------------------------------------------------------------------------------

def config_dict(**overrides: Any) -> dict[str, Any]:
    """An odd-sized GPTConfig as a dict (the rank builds GPTConfig(**it))."""
    base = dict(vocab_size=37, dim=24, n_layers=2, n_heads=3, n_kv_heads=1, ffn_dim=40,
                max_seq_len=16, rope_base=10000.0, norm_eps=1e-5)
    base.update(overrides)
    return base


def head_dim(config: dict[str, Any]) -> int:
    return config["dim"] // config["n_heads"]


def make_state(config: dict[str, Any], seed: int, std: float = 0.3) -> dict[str, torch.Tensor]:
    """Random float64 weights under the documented state_dict names (larger than the init's
    0.02, so that every part of the model moves the logits)."""
    gen = seeded_generator(seed)
    dim, hd = config["dim"], head_dim(config)
    kv = config["n_kv_heads"] or config["n_heads"]
    hidden = config["ffn_dim"]

    def w(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=F64) * std

    state = {"tok_emb.weight": torch.randn(config["vocab_size"], dim, generator=gen,
                                           dtype=F64)}
    for i in range(config["n_layers"]):
        p = f"blocks.{i}."
        state[p + "attn_norm.weight"] = 1 + 0.2 * torch.randn(dim, generator=gen, dtype=F64)
        state[p + "attn.wq.weight"] = w(config["n_heads"] * hd, dim)
        state[p + "attn.wk.weight"] = w(kv * hd, dim)
        state[p + "attn.wv.weight"] = w(kv * hd, dim)
        state[p + "attn.wo.weight"] = w(dim, config["n_heads"] * hd)
        state[p + "mlp_norm.weight"] = 1 + 0.2 * torch.randn(dim, generator=gen, dtype=F64)
        state[p + "mlp.gate.weight"] = w(hidden, dim)
        state[p + "mlp.up.weight"] = w(hidden, dim)
        state[p + "mlp.down.weight"] = w(dim, hidden)
    state["norm.weight"] = 1 + 0.2 * torch.randn(dim, generator=gen, dtype=F64)
    state["lm_head.weight"] = state["tok_emb.weight"]
    return state


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


def gpt_probe(kind: str, config: dict[str, Any], state: dict[str, torch.Tensor] | None,
              dtype: torch.dtype | None = F64, seed: int = 0, **fields: Any) -> dict[str, Any]:
    return special(kind, config=config, state=state, dtype=dtype, seed=seed, **fields)


def gpt_tolerance(config: dict[str, Any], seq: int, magnitude: float) -> Tolerance:
    """A float32 forward of the GPT against the float64 reference: per layer a chain of dot
    products (dim for q/k/v, head_dim for scores, seq for softmax and p·v, n_heads·head_dim for
    wo, dim and hidden for the MLP), a few elementwise roundings, two norms; the head adds dim.
    `magnitude` bounds the size of the intermediate values the roundings are relative to."""
    per_layer = 2 * config["dim"] + head_dim(config) + 2 * seq + config["ffn_dim"] + 24
    depth = config["n_layers"] * per_layer + config["dim"] + 8
    return bound(F32, depth=depth, magnitude=magnitude)


__all__ = ["F32", "F64", "bound", "tolerance"]


# ---- the parent-side half of the discipline check -----------------------------------------------

FORBIDDEN_ATTRIBUTES = {"scaled_dot_product_attention": "F.scaled_dot_product_attention",
                        "MultiheadAttention": "nn.MultiheadAttention",
                        "multi_head_attention_forward": "F.multi_head_attention_forward",
                        "rms_norm": "F.rms_norm", "RMSNorm": "nn.RMSNorm"}
# RMSNorm is also the name of the student's own class: only `x.RMSNorm` or an import of it
# from torch counts, never the bare name.


def static_forbidden(impl: Any) -> dict[str, list[str]]:
    """Forbidden names the submitted model.py mentions, read in this process with `ast` (the
    rank cannot touch it): top-level definition (or "<module>") -> ["line N: nn.RMSNorm", ...].

    Counts attribute accesses (`F.scaled_dot_product_attention`, `torch.nn.RMSNorm`), imports of
    the names from torch, and string constants equal to a name (`getattr(F, "rms_norm")`);
    docstrings and comments never count. The rank's watch (`_ranks.Watch`) sees the calls that
    actually run; this sees the ones a submission could hide from it."""
    import ast

    from harness.impl import module_path

    try:
        source = module_path(impl, "gpt", "model").read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError):
        return {}
    found: dict[str, list[str]] = {}
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                  and isinstance(node.value.value, str)}
    for top in tree.body:
        owner = top.name if isinstance(top, (ast.FunctionDef, ast.ClassDef)) else "<module>"
        for node in ast.walk(top):
            name = None
            if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
                name = node.attr
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch"):
                name = next((a.name for a in node.names if a.name in FORBIDDEN_ATTRIBUTES),
                            None)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and id(node) not in docstrings and node.value in FORBIDDEN_ATTRIBUTES:
                name = node.value
            if name is not None:
                found.setdefault(owner, []).append(
                    f"line {getattr(node, 'lineno', 0)}: {FORBIDDEN_ATTRIBUTES[name]}")
    return found

"""Probes of the gpt hidden suite and the one launch that runs them, with their inputs.

Each test module builds a dict of probes (`probe`, `special`, `gpt_probe`) with inputs made
here (`randn`, `config_dict`, `make_state`) and registers it at import (`register`); the first
module fixture of an implementation runs every registered probe in one rank launch
(`shared_probes`), and each module reads its own back. What a probe asks the rank to do is in
`_ranks.py`; how the parent judges the answer is in `_ref.py` (references) and
`_ref_checks.py` (results, comparisons, the discipline check).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from grader.seeds import seeded_generator
from grader.suites.gpt._ranks import rank_probes
from harness.cases import Memo
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


# ---- inputs -------------------------------------------------------------------------------------

def randn(seed: int, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=seeded_generator(seed), dtype=F64) * scale


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


def gpt_probe(kind: str, config: dict[str, Any], state: dict[str, torch.Tensor] | None,
              dtype: torch.dtype | None = F64, seed: int = 0, **fields: Any) -> dict[str, Any]:
    return special(kind, config=config, state=state, dtype=dtype, seed=seed, **fields)


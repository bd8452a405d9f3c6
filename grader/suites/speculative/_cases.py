"""Tasks of the speculative suite and their launch: what a test module sends to the rank.

Each test module builds its tasks (`call`, `raises`, models as `tiny`/`constant` specs; see
`_ranks.py` for how the rank runs them), runs them all in one module-scoped launch
(`run_tasks`) and judges what comes back with `_ref`. `value(outcomes, name, what)` re-raises a
task that failed in the rank as the harness does ("not implemented yet: <function>" for a
stub). Seeds that travel to the rank are shifted here once (`seed`, selfcheck's margin runs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from grader.seeds import shifted
from grader.suites.speculative._ranks import rank_tasks
from harness.cases import case_value

F64 = torch.float64
TIMEOUT = 120.0
ModelSpec = tuple[str, Any]


def run_tasks(launch: Callable[..., Any], tasks: dict[str, dict],
              timeout: float = TIMEOUT) -> dict[str, dict]:
    return launch(rank_tasks, world_size=1, args=(tasks,), timeout=timeout).values[0]


def value(outcomes: Mapping[str, dict], name: str, what: str) -> Any:
    return case_value(outcomes[name], what)


def call(module: str, fn: str, *args: Any, **kwargs: Any) -> dict:
    return {"kind": "call", "module": module, "fn": fn, "args": list(args), "kwargs": kwargs}


def raises(module: str, fn: str, *args: Any, **kwargs: Any) -> dict:
    return {**call(module, fn, *args, **kwargs), "kind": "raises"}


def seed(base: int) -> int:
    """A seed that travels to the rank, shifted once here (selfcheck's margin runs)."""
    return shifted(base)


# ---- models and their distributions -----------------------------------------------------------

def tiny(vocab_size: int, seed: int, **kwargs: Any) -> ModelSpec:
    return ("tiny", {"vocab_size": vocab_size, "seed": seed, **kwargs})


def constant(logits: Sequence[float]) -> ModelSpec:
    return ("constant", torch.tensor(list(logits), dtype=F64))

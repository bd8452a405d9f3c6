"""Probes of the ppo hidden suite and their launch.

Every unit test module builds a dict of *probes* in the parent (`probe`: a call of one function
of ppo.py with inputs made here; see `_ranks.py`) and runs all of them in one rank
(`run_probes`, a module-scoped fixture's single launch).

The CartPole learning test lives in test_z_learning.py: the name sorts last, so a mutant run
(which stops at the first failure) meets every cheap unit test before the expensive one.
"""

from __future__ import annotations

from typing import Any

import torch

from grader.suites.ppo._ranks import rank_probes

PROBE_TIMEOUT = 120.0
F64 = torch.float64


def probe(fn: str, *args: Any, grad: tuple[int, ...] = (), weights: torch.Tensor | None = None,
          **kwargs: Any) -> dict[str, Any]:
    return {"fn": fn, "args": list(args), "kwargs": kwargs, "grad": list(grad),
            "weights": weights}



def run_probes(launch: Any, probes: dict[str, dict]) -> dict[str, dict]:
    return launch(rank_probes, world_size=1, args=(probes,), timeout=PROBE_TIMEOUT).values[0]


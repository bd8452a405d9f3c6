"""The suite's launches, test side: the cases of each launch built once per session (inputs
and expected values, from `_cases`), sent to the ranks without their expected values, and
launched once per session and implementation."""

from __future__ import annotations

from grader.suites.context_parallel import _cases
from grader.suites.context_parallel._common import BACKEND, TIMEOUT_S, TRANSPORT, rank_all
from harness.cases import Memo

_CASES: dict[str, dict[str, dict]] = {}
_RUNS = Memo(hang_timeout=20.0)


def strip(case: dict) -> dict:
    return {k: v for k, v in case.items() if k != "expected"}


def cases_for(which: str) -> dict[str, dict]:
    """The cases of one launch, built once per session (inputs and expected values)."""
    if which not in _CASES:
        _CASES[which] = _cases.build(which)
    return _CASES[which]


LAUNCHES = {  # name -> (world size, transport)
    "ring2": (2, TRANSPORT), "ring3": (3, TRANSPORT), "ring4": (4, TRANSPORT),
    "ulysses2": (2, TRANSPORT), "ulysses4": (4, TRANSPORT),
}


def run(launch, impl, which: str):
    """The launch `which`, once per session and implementation."""
    world, transport = LAUNCHES[which]

    def make():
        cases = {name: strip(c) for name, c in cases_for(which).items()}
        return launch(rank_all, world_size=world, args=(cases,), backend=BACKEND,
                      transport=transport, timeout=_RUNS.timeout(TIMEOUT_S))

    return _RUNS.get((str(impl.text), which), make)


def expected(which: str, name: str) -> dict:
    return cases_for(which)[name]["expected"]

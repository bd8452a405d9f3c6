"""The launch of the mixed_precision hidden suite and the reading of what it returns.

Each test module builds its cases in the parent, runs all of them in one rank (a module-scoped
fixture's single launch, `launch_cases`; every case in its own error scope,
`harness.cases.run_cases`) and reads each case back with `outcome` or `error_of`. The rank gets
inputs only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness import cases as harness_cases
from harness.cases import case_value

TIMEOUT = 120.0
# A case that loops for ever is ended by the launch's limit, and the launch is made again
# without it (harness.cases.launch_cases), so it costs only itself; after this many such cases
# the next one fails every case of the launch, as a bug that loops everywhere would otherwise
# cost one limit per case.
MAX_LEFT_OUT = 2


def launch_cases(launch: Any, rank_fn: Callable[..., Any], cases: dict[str, Any]) -> dict:
    """The outcomes ({name: outcome}) of `rank_fn` over `cases` in one rank; a case that hangs
    costs only itself (see MAX_LEFT_OUT)."""
    return harness_cases.launch_cases(
        lambda env: launch(rank_fn, world_size=1, args=(cases,), timeout=TIMEOUT, env=env),
        list(cases), max_left_out=MAX_LEFT_OUT).values[0]


def outcome(results: dict, key: str, what: str) -> Any:
    """The case's value; a failed case re-raises here ("not implemented yet: ..." for a stub)."""
    return case_value(results[key], what)


def error_of(results: dict, key: str, what: str) -> dict | None:
    """The case's exception as data ({"type", "message", ...}), None if it returned; a stub
    re-raises as "not implemented"."""
    got = results[key]
    if got.get("ok"):
        return None
    error = got.get("error") or {}
    if error.get("not_implemented"):
        case_value(got, what)
    return error


# -- rounding ---------------------------------------------------------------------------------
def as_float32(bit_patterns: list[int]) -> torch.Tensor:
    """float32 values with the given 32-bit patterns (unsigned ints below 2**32)."""
    signed = [b - 2**32 if b >= 2**31 else b for b in bit_patterns]
    return torch.tensor(signed, dtype=torch.int32).view(torch.float32)

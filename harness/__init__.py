"""The multi-rank harness: run code under test in fresh rank processes, instrumented.

`launch(fn, world_size, ...)` is the one entry point for tests; see docs/authoring.md.

The names below are imported on first use (PEP 562), so a process that only needs a torch-free
module of the harness (`harness.impl`, to name the code under test to a pytest session it
starts) does not pay seconds of CPU for importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.commlog import COMMUNICATION_APIS, P2P_APIS, CommRecord, Forbid
    from harness.context import RankContext, storage_bytes
    from harness.errors import (
        DiskLimitError,
        ForbiddenCallError,
        LaunchError,
        NotImplementedInRank,
        PayloadError,
        RankExit,
        RankFailure,
        RankTimeout,
        SurvivorError,
    )
    from harness.launcher import LaunchResult, launch

_HOME = {
    "COMMUNICATION_APIS": "commlog", "P2P_APIS": "commlog", "CommRecord": "commlog",
    "Forbid": "commlog", "RankContext": "context", "storage_bytes": "context",
    "ForbiddenCallError": "errors", "LaunchError": "errors", "NotImplementedInRank": "errors",
    "PayloadError": "errors", "RankExit": "errors", "RankFailure": "errors",
    "RankTimeout": "errors", "SurvivorError": "errors", "DiskLimitError": "errors",
    "LaunchResult": "launcher", "launch": "launcher",
}

__all__ = [
    "COMMUNICATION_APIS", "P2P_APIS", "CommRecord", "DiskLimitError", "Forbid",
    "ForbiddenCallError",
    "LaunchError", "LaunchResult", "NotImplementedInRank", "PayloadError", "RankContext",
    "RankExit", "RankFailure", "RankTimeout", "SurvivorError", "launch", "storage_bytes",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"harness.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

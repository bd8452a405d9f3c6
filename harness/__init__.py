"""The multi-rank harness: run code under test in fresh rank processes, instrumented.

`launch(fn, world_size, ...)` is the one entry point for tests; see docs/authoring.md.
"""

from harness.commlog import COMMUNICATION_APIS, P2P_APIS, CommRecord, Forbid
from harness.context import RankContext, storage_bytes
from harness.errors import (
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

__all__ = [
    "COMMUNICATION_APIS", "P2P_APIS", "CommRecord", "Forbid", "ForbiddenCallError",
    "LaunchError", "LaunchResult", "NotImplementedInRank", "PayloadError", "RankContext",
    "RankExit", "RankFailure", "RankTimeout", "SurvivorError", "launch", "storage_bytes",
]

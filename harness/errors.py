"""Errors raised in the parent by `launch` when a rank call goes wrong.

All derive from `LaunchError`, itself an `AssertionError`, so a failing rank is a failing test
(not an error in the test's own code). Each carries plain strings only: nothing a rank produced is
ever unpickled to build them.
"""

from __future__ import annotations

from typing import Any


class LaunchError(AssertionError):
    """Base class: a multi-rank call did not return cleanly.

    `cases`: for a rank that failed or hung while the ranks ran `harness.cases.run_cases`, the
    case each rank was inside ({rank: name}, "" between cases), from the ranks' case logs;
    empty otherwise. It picks the case to leave out (`harness.cases.launch_cases`), never a
    verdict."""

    cases: dict[int, str] = {}  # never mutated: an instance that has cases gets its own


class DiskLimitError(LaunchError):
    """The launch's ranks wrote more to their folders than a launch may keep on disk
    (`harness.launcher.DISK_CAP_BYTES`); the launch was ended."""


class RankFailure(LaunchError):
    """A rank raised an exception.

    Attributes: `rank`, `exc_type` (the exception's class name), `message`, `traceback` (text),
    `output_tail` (last lines of the rank's stdout+stderr).
    """

    def __init__(self, summary: str, *, rank: int, exc_type: str, message: str,
                 traceback: str, output_tail: str) -> None:
        super().__init__(summary)
        self.rank = rank
        self.exc_type = exc_type
        self.message = message
        self.traceback = traceback
        self.output_tail = output_tail


class NotImplementedInRank(RankFailure):
    """A rank raised NotImplementedError: the code under test is still a stub."""


class ForbiddenCallError(RankFailure):
    """Code under test called a `torch.distributed` API the assignment forbids.

    Raised inside the rank at the call, and again in the parent after the call even when the rank
    caught the first one (the communication log keeps the attempt).
    """

    def __init__(self, summary: str, **kwargs) -> None:
        defaults: dict[str, Any] = dict(rank=-1, exc_type="ForbiddenCallError",
                                        message=summary, traceback="", output_tail="")
        defaults.update(kwargs)
        super().__init__(summary, **defaults)


class RankExit(LaunchError):
    """A rank ended without returning: sys.exit, os._exit, or killed by a signal."""

    def __init__(self, summary: str, *, rank: int, exitcode: int | None, output_tail: str) -> None:
        super().__init__(summary)
        self.rank = rank
        self.exitcode = exitcode
        self.output_tail = output_tail


class RankTimeout(LaunchError):
    """The call did not finish within its wall-clock limit.

    `stacks` maps each rank that was still running to its Python stack (faulthandler text);
    `cases` maps each of those ranks to the `harness.cases.run_cases` case it was inside when
    the launch was ended ("" when it was between cases or ran none): read from the rank's case
    log, so a hint and a case to blame, never a verdict (`harness.cases.launch_cases`).
    """

    def __init__(self, summary: str, *, stacks: dict[int, str], timeout: float,
                 cases: dict[int, str] | None = None) -> None:
        super().__init__(summary)
        self.stacks = stacks
        self.timeout = timeout
        self.cases = dict(cases or {})


class PayloadError(LaunchError):
    """A rank returned something that is not plain data, or more bytes than the cap."""


class SurvivorError(LaunchError):
    """A process the launch started was still alive after it ended (a daemon, a double fork,
    a `setsid` escape). It has been killed; the launch fails all the same.

    `survivors`: one line per process, "pid N: its command line".
    """

    def __init__(self, summary: str, *, survivors: list[str]) -> None:
        super().__init__(summary)
        self.survivors = survivors

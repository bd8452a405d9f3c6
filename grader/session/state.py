"""The graded session's state, shared by the plugin's modules (`grader/session/plugin.py` and the
plugins it loads): what each test scored, per implementation, kept in `config.stash[STATE]`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from grader.report.results import TestResult
from harness.impl import ImplSpec


@dataclass
class TestOutcome:
    """One graded test of one implementation, as the controller collects it from the reports."""

    nodeid: str
    name: str
    assignment: str
    visibility: str
    points: int
    outcome: str = "passed"
    reason: str = ""
    not_implemented: bool = False
    not_graded_here: bool = False
    duration: float = 0.0
    margin: float | None = None  # worst observed error / tolerance of its comparisons
    margin_at: str = ""  # which comparison that was
    exercises: tuple[str, ...] = ()  # the public names it calls (@pytest.mark.exercises)
    # not run: the reference's outcome (grader/instructor/plugin_coverage.py)
    inferred: bool = False
    order: int = 0  # its place in the collection (the suite's order)
    launches: int = 0  # harness launches it made (the `launch` fixture), setup and teardown too
    launch_s: float = 0.0

    def result(self) -> TestResult:
        return TestResult(
            nodeid=self.nodeid, name=self.name, assignment=self.assignment,
            visibility=self.visibility, points=self.points, outcome=self.outcome,
            reason=self.reason, not_implemented=self.not_implemented,
            not_graded_here=self.not_graded_here, duration=self.duration, margin=self.margin,
            margin_at=self.margin_at, exercises=self.exercises, inferred=self.inferred,
            order=self.order)


@dataclass
class SessionState:
    """The session: its implementations and options, and what its tests did so far."""

    impls: dict[str, ImplSpec]  # test-id label -> the --impl, resolved once; in --impl order
    results_path: str | None
    progress: bool
    hidden_roots: list[Path]
    stop_first: frozenset[str] = frozenset()  # labels that stop at their first failure
    sandbox: dict[str, Any] = field(default_factory=dict)
    tests: dict[tuple[str, str], TestOutcome] = field(default_factory=dict)  # (label, nodeid)
    not_run: dict[str, list[str]] = field(default_factory=dict)  # label -> node ids
    failed: dict[str, str] = field(default_factory=dict)  # label -> first failing node id
    collection_errors: list[str] = field(default_factory=list)
    timing: dict[str, float] = field(default_factory=dict)
    finished: int = 0  # tests whose teardown was reported (under xdist, others still run)
    events: IO[str] | None = None  # the event channel (grader/session/events.py), controller only

    @property
    def impl(self) -> ImplSpec:
        """The first (in a one-implementation session, the only) implementation."""
        return next(iter(self.impls.values()))

    @property
    def multi(self) -> bool:
        return len(self.impls) > 1


STATE = pytest.StashKey[SessionState]()
PLUGIN_LOADED = time.perf_counter()  # the session's clock: timings are measured from here
NOT_RUN = "not run: this implementation already failed"
INFERRED = "not run: it ran none of the code this variant changes (the reference's outcome)"
LAUNCH_CLOCK: dict[str, float] = {}  # seconds in launches since the last report (the fixture)


def take_launch_times() -> dict[str, float]:
    """The launch clocks since the last call, emptied: `spent` (seconds in launches),
    `launches` (how many) and `forkserver_s` (starting the forkserver), each only when it ran."""
    return {clock: LAUNCH_CLOCK.pop(clock) for clock in ("spent", "launches", "forkserver_s")
            if clock in LAUNCH_CLOCK}

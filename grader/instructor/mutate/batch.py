"""Grade many mutant folders in one pytest session each batch: `BatchEngine`.

A pytest session costs an interpreter start, a torch import, a collection and a forkserver
before the first test runs; a mutant usually dies at its first failing test a second later. So
the mutants are dealt round-robin into batches (`batch_size` at most, at least one per job) and
each batch is graded by one session that names every mutant with `--impl` and stops each at its
first failure (`--stop-first`, grader/session/plugin.py): per mutant that is the results a session
of its own gives (grader/tests/test_engine.py), for a fraction of the start-up.

One mutant must not change another's verdict. A crash in a rank or a hang inside a launch is
already that launch's failed test (the harness's limits). What is left is a mutant that makes
the session itself run on — slow tests that each stay inside their launch's limit — or a
session that dies. The engine follows the session's `test_end` events (grader/session/events.py:
one per finished test, with the index of its implementation): tests run one implementation after
another in `--impl` order, so the implementation on the clock is the first one not yet seen
failing or followed by another's test. When it has run past `timeout` the session is interrupted
(`run_session(interrupt=...)`, SIGINT: pytest still writes the results of what finished), the
implementations before it are judged
from those results, it is `timed_out`, and the rest go to a new session. When the one on the
clock has already reported passing tests, the overrun may belong to the next one, which has not
reported yet; that one is graded alone first, so blame never lands on the wrong mutant.
"""

from __future__ import annotations

import json
import math
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from grader.instructor.mutate.runner import Verdict, judge_session
from grader.instructor.pool import run_each
from grader.report.results import RunResult
from grader.session.runner import (
    INTERRUPT_GRACE_S,
    Session,
    interruptible,
    run_session,
    stop_all_sessions,
)
from harness.impl import ImplSpec, resolve_impl

__all__ = ["INTERRUPT_GRACE_S", "BatchEngine", "BatchRun", "Clock", "deal", "interruptible",
           "settle"]


class Clock:
    """Which implementation of a session is running, and since when (from `test_end` events)."""

    def __init__(self, count: int, started: float) -> None:
        self.count = count
        self.current = 0  # the first implementation not known to be finished
        self.since = started  # when it became current
        self.reported = [0] * count  # progress lines seen per implementation
        self.failed = [False] * count
        self.last_line = started
        self._lock = threading.Lock()

    def feed(self, event: dict[str, Any], now: float) -> None:
        """Follow one event of the session (only `test_end` of a labelled test counts)."""
        index = event.get("index")
        if event.get("event") != "test_end" or not isinstance(index, int) or index < 0:
            return
        with self._lock:
            if index >= self.count:
                return
            if index > self.current:  # the ones before it are done; it began after their last
                self.current, self.since = index, self.last_line
            self.reported[index] += 1
            if event.get("outcome") in ("failed", "error"):
                self.failed[index] = True
                if index == self.current:  # stopped at its first failure: the next one starts
                    self.current, self.since = index + 1, now
            self.last_line = now

    def overrun(self, now: float, limit: float) -> bool:
        with self._lock:
            return self.current < self.count and now - self.since > limit

    def suspect(self) -> tuple[int, bool]:
        """(the implementation on the clock, whether the next one may be the one running)."""
        with self._lock:
            index = self.current
            ambiguous = index + 1 < self.count and self.reported[index] > 0
            return index, ambiguous

    @property
    def silent(self) -> bool:
        """No test of any implementation reported."""
        with self._lock:
            return not any(self.reported)


@dataclass
class BatchRun:
    """What one batch session left: per implementation its run (None: no results for it)."""

    runs: list[RunResult | None]
    clock: Clock
    overran: bool
    returncode: int
    wall_s: float
    tail: str
    problem: str = ""


@dataclass
class BatchEngine:
    """Many implementations per pytest session, `jobs` sessions side by side.

    The `Engine` of grader/instructor/mutate/runner.py: `run(impls, timeout, on_verdict)`.
    `timeout` bounds one implementation's share of a session (its tests, or for the first of a
    session also the start-up), not the session.
    """

    paths: Sequence[Path]
    root: Path
    suites: Path | None = None
    jobs: int = 2
    batch_size: int = 16
    # Coverage guidance (grader/instructor/plugin_coverage.py): what the traced solution ran per
    # test (`trace_baseline` writes it), and per implementation folder the functions it changes;
    # a mutant's test that ran none of them under the solution is not run.
    reference: Path | None = None
    changes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _stopping: threading.Event = field(default_factory=threading.Event, repr=False)

    def run(self, impls: Sequence[tuple[str, Path]], timeout: float,
            on_verdict: Callable[[str, Verdict], None]) -> None:
        chunks = deal(list(impls), self.batch_size, self.jobs)
        lock = threading.Lock()  # verdicts are delivered from the sessions' threads

        def deliver(key: str, verdict: Verdict) -> None:
            with lock:
                on_verdict(key, verdict)

        tasks = [(i, partial(self.grade, chunk, timeout, deliver))
                 for i, chunk in enumerate(chunks)]
        try:
            run_each(self.jobs, tasks, lambda _key, _none: None)
        except BaseException:
            self._stopping.set()
            raise

    def stop(self) -> None:
        """Kill every running session (their process groups), start no more."""
        self._stopping.set()
        stop_all_sessions()

    def grade(self, chunk: Sequence[tuple[str, Path]], timeout: float,
              deliver: Callable[[str, Verdict], None]) -> None:
        """Grade one batch to the end: sessions until every implementation has a verdict."""
        queue = [(key, resolve_impl(str(folder))) for key, folder in chunk]
        while queue:
            if self._stopping.is_set():
                return
            if len(queue) == 1:
                key, spec = queue.pop()
                deliver(key, self.alone(spec, timeout))
                continue
            batch = self.session([spec for _, spec in queue], timeout)
            verdicts, queue, alone = settle(queue, batch, timeout)
            if self._stopping.is_set():  # the session was killed by stop(): no verdicts
                return
            for key, verdict in verdicts:
                deliver(key, verdict)
            if alone is not None:
                deliver(alone[0], self.alone(alone[1], timeout))

    def trace_baseline(self, folder: Path, record: Path, timeout: float) -> Verdict:
        """Grade the unmutated solution's folder with its ranks traced, writing to `record`
        what each test ran; later sessions guide the mutants by it (`reference`)."""
        spec = resolve_impl(str(folder))
        plan = record.with_suffix(".plan.json")
        plan.write_text(json.dumps({"trace": spec.argument}), encoding="utf-8")
        verdict = judge_session(run_session(
            self.paths, spec, stop_first=True, timeout=timeout, root=self.root,
            suites=self.suites, extra=("--coverage-plan", str(plan), "--coverage-out",
                                       str(record))))
        self.reference = record if record.is_file() else None
        return verdict

    def _plan_args(self, specs: Sequence[ImplSpec], folder: Path) -> tuple[str, ...]:
        """`--coverage-plan` for a session over `specs`, written into `folder`; () without a
        reference or where no spec says what it changes."""
        variants = {spec.argument: {"changed": list(self.changes[spec.argument])}
                    for spec in specs if spec.argument in self.changes}
        if self.reference is None or not variants:
            return ()
        path = folder / "plan.json"
        path.write_text(json.dumps({"reference": str(self.reference), "variants": variants}),
                        encoding="utf-8")
        return ("--coverage-plan", str(path))

    def alone(self, spec: ImplSpec, timeout: float) -> Verdict:
        """One implementation in a session of its own (`-x`), killed after `timeout`."""
        with tempfile.TemporaryDirectory(prefix="mlsys-mutate-alone-") as tmp:
            return judge_session(run_session(
                self.paths, spec, stop_first=True, timeout=timeout, root=self.root,
                suites=self.suites, extra=self._plan_args([spec], Path(tmp))))

    def session(self, specs: list[ImplSpec], timeout: float) -> BatchRun:
        """Run one session over `specs`, interrupting it when one of them overruns."""
        with tempfile.TemporaryDirectory(prefix="mlsys-mutate-batch-") as tmp:
            started = time.perf_counter()
            clock = Clock(len(specs), started)
            # Each implementation is bounded by the clock; this only backs it up.
            limit = timeout * (len(specs) + 1) + INTERRUPT_GRACE_S
            session = run_session(
                self.paths, specs, stop_first=True, timeout=limit, root=self.root,
                suites=self.suites, extra=self._plan_args(specs, Path(tmp)),
                on_event=lambda event: clock.feed(event, time.perf_counter()),
                interrupt=lambda now: clock.overrun(now, timeout))
        by_impl = {run.impl: run for run in session.results}
        runs = [by_impl.get(spec.text) for spec in specs]
        problem = session.problem if session.result is None else ""
        return BatchRun(runs, clock, session.interrupted or session.timed_out,
                        session.returncode, session.wall_s, session.output_tail, problem)


Pending = list[tuple[str, ImplSpec]]


def settle(queue: Pending, batch: BatchRun, timeout: float
           ) -> tuple[list[tuple[str, Verdict]], Pending, tuple[str, ImplSpec] | None]:
    """(verdicts, what still needs a session, one to grade alone next) after a batch session."""
    clock = batch.clock
    if not batch.overran and not batch.problem:
        views = [_view(batch, run) for run in batch.runs]
        spent = sum(view.wall_s for view in views)
        if views:  # start-up and collection: the first one's share
            views[0] = replace(views[0], wall_s=views[0].wall_s + max(batch.wall_s - spent, 0))
        return [(key, judge_session(view)) for (key, _), view in zip(queue, views)], [], None
    suspect, ambiguous = clock.suspect()
    if not batch.overran and (clock.silent or suspect >= len(queue)):
        # Nothing ran, or all ran and no results came back: no one mutant to blame.
        return [(key, Verdict("error", reason=batch.problem)) for key, _ in queue], [], None
    verdicts: list[tuple[str, Verdict]] = []
    rest: Pending = []
    for index, (key, spec) in enumerate(queue[:suspect]):
        run = batch.runs[index]
        if run is None:  # finished, but the session wrote no results: grade it again
            rest.append((key, spec))
        else:
            verdicts.append((key, judge_session(_view(batch, run, finished=True))))
    rest += queue[suspect + 1:]
    key, spec = queue[suspect]
    if ambiguous:
        return verdicts, rest, (key, spec)
    run = batch.runs[suspect]
    ran = tuple(t.nodeid for t in run.tests if t.passed) if run is not None else ()
    if batch.overran:
        why = (f"it ran past {timeout:.0f} s in a session of several mutants, which was "
               "stopped there; the others were graded apart")
        verdicts.append((key, Verdict("timed_out", reason=why, tests_run=ran, wall_s=timeout)))
    else:
        verdicts.append((key, Verdict("error", reason=f"the session ended while it ran: "
                                      f"{batch.problem}", tests_run=ran)))
    return verdicts, rest, None


def _view(batch: BatchRun, run: RunResult | None, *, finished: bool = False) -> Session:
    """One implementation's share of a batch session, shaped as a session of its own."""
    problem = ""
    if run is None:
        problem = batch.problem or "the session wrote no results for it"
    elif not finished and batch.returncode not in (0, 1):
        problem = f"pytest exited with {batch.returncode}"
    wall_s = run.duration if run is not None else 0.0
    return Session(batch.returncode, False, wall_s, batch.tail, run, problem,
                   (run,) if run else ())


def deal(items: list[tuple[str, Path]], batch_size: int, jobs: int
         ) -> list[list[tuple[str, Path]]]:
    """Round-robin into batches of at most `batch_size`, at least `jobs` of them (when there
    are that many items): neighbouring mutants (same function, often all slow or all
    surviving) land in different batches, so the batches take about as long."""
    if not items:
        return []
    count = min(len(items), max(jobs, math.ceil(len(items) / max(1, batch_size))))
    return [items[i::count] for i in range(count)]

"""Run generated mutants against an assignment's suites and judge each one.

A generated mutant is never written into `solutions/<id>/mutants/` (those are the hand-written
mutants selfcheck requires). Each one becomes a folder laid out like `assignments/` in a
temporary directory — `<tmp>/<slug>/<id>/<module>.py` for every module the manifest lists, the
mutated module changed — and is graded as `--impl <tmp>/<slug>`, the directory form
`harness/impl.py` already resolves. Provided helpers are imported absolutely
(`assignments.<id>.<helper>`), so the folder holds the editable modules only.

How the folders are graded is an `Engine`. `SessionEngine` runs one isolated pytest session per
mutant through `grader.session.runner.run_session`, stopping at the first failure (`-x`), a few at a
time (`--session-per-mutant`); `BatchEngine` (grader/instructor/mutate/batch.py), the default,
grades a batch of mutants in one session.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Protocol

from grader.instructor.mutate.generate import Generation, Mutant
from grader.instructor.pool import run_each
from grader.instructor.variant_changes import lines_changes
from grader.manifest import Assignment
from grader.session.runner import Session, run_session
from harness.impl import resolve_impl

VERDICTS = ("killed", "survived", "timed_out", "error")


@dataclass(frozen=True)
class Verdict:
    """What grading one implementation folder showed."""

    status: str  # one of VERDICTS
    killed_by: str = ""  # nodeid of the first graded test that failed
    reason: str = ""  # that test's one-line feedback, or what went wrong with the session
    tests_run: tuple[str, ...] = ()  # nodeids of the graded tests that ran (all passed: survived)
    wall_s: float = 0.0

    def __post_init__(self) -> None:
        if self.status not in VERDICTS:
            raise ValueError(f"verdict {self.status!r} is not one of {', '.join(VERDICTS)}")


class Engine(Protocol):
    """Grades implementation folders and reports a verdict for each, in any order."""

    def run(self, impls: Sequence[tuple[str, Path]], timeout: float,
            on_verdict: Callable[[str, Verdict], None]) -> None:
        """Grade each `(key, folder)`; call `on_verdict(key, verdict)` as each one finishes.

        `timeout` bounds one implementation's grading; past it the verdict is `timed_out`.
        """
        ...


class BaselineFailed(RuntimeError):
    """The unmutated solution, laid out as a mutant is, does not pass the suites."""


def judge_session(session: Session) -> Verdict:
    """A mutant is killed when a graded test failed; GPU-only tests skipped here do not count."""
    if session.timed_out:
        return Verdict("timed_out", reason=session.problem, wall_s=session.wall_s)
    run = session.result
    if run is None or run.collection_errors or not run.tests:
        why = session.problem or ("a suite could not be collected" if run is not None
                                  and run.collection_errors else "no graded test ran")
        return Verdict("error", reason=why, wall_s=session.wall_s)
    graded = [t for t in run.tests if not t.not_graded_here]
    failed = [t for t in graded if not t.passed]
    # A test that never reached the mutated function is not run
    # (grader/instructor/plugin_coverage.py): it passes as the solution did, and is not among the
    # tests that ran on the mutant.
    ran = tuple(t.nodeid for t in graded if not t.inferred)
    if failed:
        return Verdict("killed", killed_by=failed[0].nodeid, reason=failed[0].feedback,
                       tests_run=ran, wall_s=session.wall_s)
    if session.problem:
        return Verdict("error", reason=session.problem, tests_run=ran, wall_s=session.wall_s)
    return Verdict("survived", tests_run=ran, wall_s=session.wall_s)


@dataclass
class SessionEngine:
    """One isolated pytest session per implementation, `jobs` at a time, stopping at -x."""

    paths: Sequence[Path]
    root: Path
    suites: Path | None = None
    jobs: int = 2

    def run(self, impls: Sequence[tuple[str, Path]], timeout: float,
            on_verdict: Callable[[str, Verdict], None]) -> None:
        tasks = [(key, partial(run_session, self.paths, resolve_impl(str(folder)),
                               stop_first=True, timeout=timeout, root=self.root,
                               suites=self.suites))
                 for key, folder in impls]
        run_each(self.jobs, tasks, lambda key, session: on_verdict(key, judge_session(session)))


def write_tree(dest: Path, assignment: Assignment, sources: dict[str, str],
               mutant: Mutant | None = None) -> Path:
    """`dest/<id>/<module>.py` for every module (one of them mutated); returns `dest`."""
    folder = dest / assignment.id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text("", encoding="utf-8")
    for module, source in sources.items():
        if mutant is not None and mutant.module == module:
            source = mutant.apply(source)
        (folder / f"{module}.py").write_text(source, encoding="utf-8")
    return dest


def spread(items: Sequence[Mutant], limit: int | None) -> list[Mutant]:
    """At most `limit` items, evenly spaced over the list (every module gets its share)."""
    if limit is None or limit >= len(items):
        return list(items)
    if limit <= 0:
        return []
    return [items[(i * len(items)) // limit] for i in range(limit)]


@dataclass(frozen=True)
class Baseline:
    tests: int
    wall_s: float


def run_baseline(engine: Engine, assignment: Assignment, generation: Generation, workdir: Path,
                 timeout: float) -> Baseline:
    """Grade the unmutated solution as a mutant folder; it must pass every graded test."""
    folder = write_tree(workdir / "_solution", assignment, generation.sources)
    trace = getattr(engine, "trace_baseline", None)
    verdicts: list[Verdict] = []
    if trace is not None:  # also records what each test ran: the mutants' coverage guide
        verdicts.append(trace(folder, workdir / "baseline_coverage.json", timeout))
    else:
        engine.run([("_solution", folder)], timeout, lambda _key, v: verdicts.append(v))
    verdict = verdicts[0] if verdicts else Verdict("error", reason="the engine gave no verdict")
    if verdict.status != "survived":
        detail = f"{verdict.killed_by}: {verdict.reason}" if verdict.killed_by else verdict.reason
        raise BaselineFailed(f"the unmutated solution of {assignment.id}, graded as a folder "
                             f"({folder}), does not pass: {verdict.status}: {detail}; fix that "
                             "first (python -m grader grade --impl solutions)")
    return Baseline(tests=len(verdict.tests_run), wall_s=verdict.wall_s)


def run_mutants(engine: Engine, assignment: Assignment, generation: Generation,
                mutants: Sequence[Mutant], workdir: Path, timeout: float,
                on_verdict: Callable[[Mutant, Verdict], None]) -> dict[str, Verdict]:
    """Grade each mutant's folder; mutant id -> verdict."""
    by_key = {m.mutant_id: m for m in mutants}
    impls = [(m.mutant_id, write_tree(workdir / m.slug, assignment, generation.sources, m))
             for m in mutants]
    changes = getattr(engine, "changes", None)
    if changes is not None:  # coverage guidance: the function each mutant changes
        for mutant, (_, folder) in zip(mutants, impls):
            source = generation.sources[mutant.module]
            changed = lines_changes(source, mutant.module, mutant.line,
                                    mutant.last_line(source))
            if changed is not None:
                changes[resolve_impl(str(folder)).argument] = changed
    verdicts: dict[str, Verdict] = {}

    def record(key: str, verdict: Verdict) -> None:
        verdicts[key] = verdict
        on_verdict(by_key[key], verdict)

    engine.run(impls, timeout, record)
    return verdicts


class Progress:
    """`[#####...............]  12/119 killed 10, ~3m40s left: <mutant> <verdict>`.

    One self-contained line per verdict (it reads the same in a terminal, a pipe and a CI log);
    the time left is the time per mutant so far times the mutants left.
    """

    WIDTH = 20

    def __init__(self, total: int, echo: Callable[[str], None]) -> None:
        self.total, self.echo = total, echo
        self.done = self.killed = 0
        self.started = time.perf_counter()

    def __call__(self, mutant: Mutant, verdict: Verdict) -> None:
        self.done += 1
        self.killed += verdict.status == "killed"
        elapsed = time.perf_counter() - self.started
        left = elapsed / self.done * (self.total - self.done)
        what = f"killed by {verdict.killed_by.rpartition('/')[2]}" \
            if verdict.status == "killed" else verdict.status.upper().replace("_", " ")
        width = len(str(self.total))
        filled = self.WIDTH * self.done // max(1, self.total)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        self.echo(f"[{bar}] {self.done:>{width}}/{self.total} killed {self.killed}, "
                  f"~{_duration(left)} left: {mutant.name} {what}")


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"

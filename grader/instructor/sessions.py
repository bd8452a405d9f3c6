"""Selfcheck's sessions: which implementation runs there are, how they are grouped into pytest
sessions, and how those sessions are run.

Per assignment, one session grades the solution, the stub, the partial-credit variants and every
mutant (grader/session/plugin.py parametrizes each test over the implementations; mutants stop at
their first failure); the margin runs (the solution with seeds shifted and 2 threads per rank) wait
for the solution's run and rerun only the tests that compared with a tolerance. `together=False`
gives one session per implementation (the old way, kept for `python -m grader bench selfcheck`).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from grader.instructor import caught_first
from grader.instructor.partial import Variants
from grader.instructor.pool import run_pool
from grader.instructor.variant_changes import mutant_changes, stub_changes
from grader.manifest import Course
from grader.report.results import RunResult
from grader.session.runner import Session, run_session, suite_paths
from harness.impl import ImplSpec, resolve_impl

# The solution's extra runs for the margin check: (seed shift, torch threads per rank). With the
# graded run (0, 1) that is three draws of the inputs and both thread counts. The first reruns
# every test that compared with a tolerance; the later ones redraw only the tests whose margin
# in the graded run reached REDRAW_FLOOR. A margin is the worst element's rounding error over a
# derived bound, and it moves little from draw to draw (gpt's bf16 RMSNorm: 0.44-0.45 over six
# draws), so a test at a tenth of the limit (0.5) needs a fivefold jump to breach it; the tests
# near the limit are the ones worth a third draw, and they get it.
MARGIN_RUNS: tuple[tuple[int, int], ...] = ((1, 2), (2, 1))
REDRAW_FLOOR = 0.1

# Assignments whose margin runs keep a session of their own. triton_kernels' interpreter tests
# need Triton imported in interpreter mode, which fixes the mode of Triton's own library kernels
# at import; the suites whose ranks build optimizers (ddp, zero2, fsdp, pipeline, gpt) preload
# torch._dynamo into their session's forkserver, which imports Triton there. Without CUDA the
# harness makes that import interpret (`harness.forkserver.rank_env`), but on a GPU machine it is
# compiled, and the interpreter's kernels then fail with "Cannot call @triton.jit'd outside of
# the scope of a kernel".
SOLO_MARGINS = frozenset({"triton_kernels"})


@dataclass(frozen=True)
class Job:
    """One pytest session of the selfcheck."""

    assignment: str
    # "solution", "stub", "independent" (grader/tests/independent/), "mutant", "margin" (the
    # solution, inputs varied) or "partial" (the solution with one public name stubbed:
    # `subject`)
    kind: str
    impl: ImplSpec
    paths: tuple[Path | str, ...]  # suite files, or (margin runs) node ids
    variation: tuple[int, int] = (0, 1)  # (seed shift, torch threads per rank)
    subject: str = ""
    # The solution's functions this variant changes (`module:qualname`), read statically;
    # None: it may change anything. With the solution in its session, a test that ran none of
    # them there is not run again (grader/instructor/plugin_coverage.py).
    changes: tuple[str, ...] | None = None
    always: tuple[str, ...] = ()  # public names whose tests always run for it
    # (mutants) the base node id of the test that caught it last time, run first
    # (grader/instructor/caught_first.py); "" for suite order
    first: str = ""

    @property
    def label(self) -> str:
        if self.kind == "mutant":
            return f"{self.assignment} {self.impl.text}"
        if self.kind == "partial":
            return f"{self.assignment} solution with only {self.subject} stubbed"
        if self.kind == "margin":
            return f"{self.assignment} solution ({variation_text(self.variation)})"
        if self.kind == "independent":
            return f"{self.assignment} independent implementation"
        return f"{self.assignment} {self.kind}"

    @property
    def extra_args(self) -> tuple[str, ...]:
        shift, threads = self.variation
        if self.variation == (0, 1):
            return ()
        return ("--seed-shift", str(shift), "--rank-threads", str(threads),
                "-m", "not no_tolerance")


def variation_text(variation: tuple[int, int]) -> str:
    shift, threads = variation
    return f"seeds shifted by {shift}, {threads} thread{'s' if threads > 1 else ''} per rank"


def mutant_names(assignment_id: str, root: Path) -> list[str]:
    """Names of the mutants of an assignment, sorted (`__init__` and `_private` excluded)."""
    folder = root / "solutions" / assignment_id / "mutants"
    return sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))


def plan(course: Course, ids: list[str], root: Path, suites: Path | None,
         variants: dict[str, Variants] | None = None) -> list[Job]:
    """Every implementation run: solutions, stubs, the partial-credit variants (when
    `variants` holds them), margins, mutants."""
    jobs: list[Job] = []
    for kind in ("solution", "stub", "independent", "partial", "margin", "mutant"):
        for assignment in course.select(ids):
            paths = tuple(suite_paths(assignment.id, root, suites))
            if not paths:
                continue
            if kind == "partial":
                found = (variants or {}).get(assignment.id)
                if found is not None:
                    jobs += [Job(assignment.id, "partial", resolve_impl(str(found.path(name))),
                                 paths, subject=name,
                                 changes=stub_changes(found.modules[name], name),
                                 always=tuple(sorted({name} | found.dependants[name])))
                             for name in found.names]
            elif kind == "independent":
                # Fairness: a correct implementation nobody here wrote, graded in the same
                # session as the solution (it changes everything, so every test runs for it).
                folder = root / "grader" / "tests" / "independent"
                if (folder / assignment.id).is_dir():
                    jobs.append(Job(assignment.id, "independent",
                                    resolve_impl(str(folder), root), paths))
            elif kind == "margin":
                jobs += [Job(assignment.id, "margin", resolve_impl("solutions", root), paths,
                             variation) for variation in MARGIN_RUNS]
            elif kind == "mutant":
                solution_dir = root / "solutions" / assignment.id
                hints = caught_first.load(root, assignment.id)
                jobs += [
                    Job(assignment.id, "mutant",
                        resolve_impl(f"mutant:{assignment.id}/{name}", root), paths,
                        changes=mutant_changes(solution_dir / "mutants" / f"{name}.py",
                                               solution_dir),
                        first=hints.get(name, ""))
                    for name in mutant_names(assignment.id, root)
                ]
            else:
                impl = "solutions" if kind == "solution" else "assignments"
                jobs.append(Job(assignment.id, kind, resolve_impl(impl, root), paths))
    return jobs


@dataclass(frozen=True)
class Batch:
    """Jobs graded by one pytest session: one implementation, several implementations of one
    assignment, or (margin runs) one implementation and variation over several assignments."""

    jobs: tuple[Job, ...]

    @property
    def label(self) -> str:
        if len(self.jobs) == 1:
            return self.jobs[0].label
        if self.across_assignments:
            first = self.jobs[0]
            return (f"solution ({variation_text(first.variation)}) of {len(self.jobs)} "
                    "assignments in one session")
        return f"{self.jobs[0].assignment}: {len(self.jobs)} implementations in one session"

    @property
    def across_assignments(self) -> bool:
        return len({job.assignment for job in self.jobs}) > 1


def batches(todo: list[Job], *, together: bool = True) -> list[Batch]:
    """Group the jobs into sessions. `together`: per assignment, the solution, the stub and
    every mutant share one session (grader/session/plugin.py grades several implementations in one
    pytest session); the margin runs keep their own, since their seeds shape collection, and
    `run_all` merges those of several assignments. Otherwise one session per job (the old way,
    kept for `bench selfcheck`)."""
    if not together:
        return [Batch((job,)) for job in todo]
    grouped: dict[str, list[Job]] = {}
    single: list[Batch] = []
    for job in todo:
        if job.kind == "margin":
            single.append(Batch((job,)))
        else:
            grouped.setdefault(job.assignment, []).append(job)
    return [Batch(tuple(jobs)) for jobs in grouped.values()] + single


def run_all(sessions: list[Batch], on_batch: Callable[[Batch, list[tuple[Job, Session]]], None],
            *, jobs: int, timeout: float, root: Path, suites: Path | None,
            merge_margins: bool = True) -> None:
    """Run the sessions at most `jobs` at a time, handing each finished batch to `on_batch`.

    The margin runs wait for their assignment's solution run and rerun only the tests that
    compared a value with a tolerance there (the others have no margin to show; with none, they
    are not run and `on_batch` gets no view of them). They start once every other session has
    started; with `merge_margins`, those ready for one variation (seed shift, threads) are
    merged into as many sessions as there are free workers, balanced by the cost of each
    assignment's solution run — a session start, a torch import and a forkserver for several
    assignments instead of one each, and no worker left idle (`SOLO_MARGINS` stay apart).
    """
    def margins_only(batch: Batch) -> bool:
        return all(job.kind == "margin" for job in batch.jobs)

    queue = [b for b in sessions if not margins_only(b)]
    deferred: dict[str, list[Job]] = {}
    for batch in filter(margins_only, sessions):
        for job in batch.jobs:
            deferred.setdefault(job.assignment, []).append(job)
    ready: dict[tuple[int, int], list[Job]] = {}  # variation -> margin jobs that may start
    cost: dict[str, float] = {}  # assignment -> its solution run's seconds

    def next_batches(free: int) -> list[Batch]:
        if queue:
            return [queue.pop(0)]
        if not ready:
            return []
        variation = max(ready, key=lambda v: len(ready[v]))
        waiting = ready[variation]
        solo = [job for job in waiting if job.assignment in SOLO_MARGINS or not merge_margins]
        if solo:
            waiting.remove(solo[0])
            found = [Batch((solo[0],))]
        else:
            found = [Batch(group) for group in balanced(waiting, free, cost)]
            waiting.clear()
        if not waiting:
            del ready[variation]
        return found

    def take(free: int) -> list[tuple[Batch, Callable[[], list[tuple[Job, Session]]]]]:
        return [(batch, partial(run_batch, batch, timeout=timeout, root=root, suites=suites))
                for batch in next_batches(free)]

    def done(batch: Batch, views: list[tuple[Job, Session]]) -> None:
        on_batch(batch, views)
        for job, session in views:
            if job.kind != "solution":
                continue
            cost[job.assignment] = session.wall_s
            for margin in deferred.pop(job.assignment, []):
                narrowed = narrow_job(margin, session.result,
                                      floor=margin_floor(margin.variation))
                if narrowed is not None:
                    ready.setdefault(margin.variation, []).append(narrowed)

    run_pool(jobs, take, done)


def balanced(todo: list[Job], parts: int, cost: dict[str, float]) -> list[tuple[Job, ...]]:
    """`todo` in at most `parts` groups of about equal cost (the longest first, each to the
    cheapest group so far), so that merged margin sessions keep every worker busy."""
    groups: list[list[Job]] = [[] for _ in range(max(1, min(parts, len(todo))))]
    totals = [0.0] * len(groups)
    for job in sorted(todo, key=lambda j: -cost.get(j.assignment, 1.0)):
        i = totals.index(min(totals))
        groups[i].append(job)
        totals[i] += cost.get(job.assignment, 1.0)
    return [tuple(group) for group in groups if group]


def margin_floor(variation: tuple[int, int]) -> float:
    """The graded run's margin from which a test is rerun with `variation` (see
    `REDRAW_FLOOR`): every toleranced test in the first margin run, those near the limit after."""
    return 0.0 if variation == MARGIN_RUNS[0] else REDRAW_FLOOR


def narrow_job(job: Job, solution: RunResult | None, *, floor: float = 0.0) -> Job | None:
    """The margin job limited to the tests that recorded a margin of at least `floor` in the
    solution's run (all of them when that run gave no results; None when there is none)."""
    if solution is None:
        return job
    nodeids = tuple(t.nodeid for t in solution.tests
                    if t.margin is not None and t.margin >= floor)
    if not nodeids:
        return None
    return replace(job, paths=nodeids)


def narrow_to_margins(batch: Batch, solution: RunResult | None) -> Batch | None:
    """`narrow_job` for every job of a batch of margin runs (None when none is left)."""
    jobs = [narrow_job(job, solution, floor=margin_floor(job.variation))
            for job in batch.jobs]
    if any(job is None for job in jobs):
        return None
    if all(new is old for new, old in zip(jobs, batch.jobs)):
        return batch
    return Batch(tuple(job for job in jobs if job is not None))


def coverage_plan(batch: Batch, path: Path) -> tuple[str, ...]:
    """Write the session's coverage plan (grader/instructor/plugin_coverage.py) to `path` and
    return the pytest arguments that use it: the solution is traced, each variant that says
    what it changes skips the tests that ran none of it, and each mutant with a record runs the
    test that caught it last time first. () when the batch has no solution first."""
    if not batch.jobs or batch.jobs[0].kind != "solution":
        return ()
    variants = {job.impl.argument: {"changed": list(job.changes), "always": list(job.always)}
                for job in batch.jobs[1:] if job.changes is not None}
    first = {job.impl.argument: job.first for job in batch.jobs[1:] if job.first}
    if not variants and not first:
        return ()
    path.write_text(json.dumps({"trace": batch.jobs[0].impl.argument, "variants": variants,
                                "first": first}), encoding="utf-8")
    return ("--coverage-plan", str(path))


def run_batch(batch: Batch, *, timeout: float, root: Path, suites: Path | None
              ) -> list[tuple[Job, Session]]:
    """Run one session for the batch; each job's view of it, with the session's wall time
    shared out by the time each job's tests took (start-up to the first)."""
    first = batch.jobs[0]
    if len(batch.jobs) == 1:
        stop = first.kind == "mutant"
        return [(first, run_session(first.paths, first.impl, stop_first=stop, timeout=timeout,
                                    root=root, suites=suites, extra=first.extra_args))]
    more = timeout + 60.0 * (len(batch.jobs) - 1)
    if batch.across_assignments:  # one implementation and variation, several assignments
        paths = [path for job in batch.jobs for path in job.paths]
        session = run_session(paths, first.impl, timeout=more, root=root, suites=suites,
                              extra=first.extra_args)
        views = [session.for_assignment(job.assignment) for job in batch.jobs]
    else:
        stop = [job.impl for job in batch.jobs if job.kind == "mutant"]
        with tempfile.TemporaryDirectory(prefix="mlsys-plan-") as tmp:
            extra = first.extra_args + coverage_plan(batch, Path(tmp) / "plan.json")
            session = run_session(first.paths, [job.impl for job in batch.jobs],
                                  stop_first=stop, timeout=more, root=root, suites=suites,
                                  extra=extra)
        views = [session.for_impl(job.impl) for job in batch.jobs]
    spent = [view.result.duration if view.result else 0.0 for view in views]
    overhead = max(session.wall_s - sum(spent), 0.0)
    return [(job, replace(view, wall_s=seconds + (overhead if i == 0 else 0.0)))
            for i, (job, view, seconds) in enumerate(zip(batch.jobs, views, spent))]

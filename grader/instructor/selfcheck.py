"""`python -m grader selfcheck`: prove that each assignment's suites grade what they claim.

Per assignment, these checks (docs/design.md, principle 5):

- signatures: every module in the manifest's `modules` has the same public names and
  signatures in the stub and the solution (read with `ast`, never imported);
- points: collected points (public + hidden) equal the manifest's `points`, and the public
  suite's points equal `public_points`;
- solution: the reference solution passes every graded test;
- stub: every graded test fails with "not implemented" — a crash, a hang, a pass or a failure
  for another reason is a breach;
- mutants: every `solutions/<id>/mutants/<name>.py` fails at least one test (run with `-x`;
  the test that caught it is printed);
- margins: the solution also passes with every seed shifted and with 2 torch threads per rank
  (`MARGIN_RUNS`), and over all those runs no comparison uses more than half its tolerance
  (observed error / tolerance ≤ `grader.compare.MAX_MARGIN`); the worst margin is printed;
- worksheet: the nbgrader worksheet's source scores full marks, its committed student version
  is up to date, scores zero and holds no solution or hidden test
  (`grader/instructor/worksheets.py`).

Per assignment, one pytest session grades the solution, the stub and every mutant (the plugin
parametrizes each test over the implementations, and stops each mutant at its first failure);
the margin runs take a session each. Sessions are independent subprocesses; a small thread pool
runs them side by side. `--session-per-impl` runs one session per implementation instead.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.compare import MAX_MARGIN
from grader.instructor.partial import (
    Variants,
    expected_feedback,
    feedback_breach,
    judge_partial,
    make_variants,
    undeclared,
)
from grader.instructor.signatures import compare_files
from grader.manifest import Assignment, Course
from grader.reports import format_table
from grader.results import RunResult, error_summary
from grader.runner import Session, run_session, stop_all_sessions, suite_paths
from harness.impl import ImplSpec, resolve_impl

CHECKS = ("signatures", "points", "solution", "stub", "mutants", "feedback", "partial", "margins",
          "worksheet")
# The solution's extra runs for the margin check: (seed shift, torch threads per rank). With the
# graded run (0, 1) that is three draws of every input and both thread counts.
MARGIN_RUNS: tuple[tuple[int, int], ...] = ((1, 2), (2, 1))


@dataclass(frozen=True)
class Job:
    """One pytest session of the selfcheck."""

    assignment: str
    # "solution", "stub", "mutant", "margin" (the solution, inputs varied) or "partial" (the
    # solution with one public name stubbed: `subject`)
    kind: str
    impl: ImplSpec
    paths: tuple[Path | str, ...]  # suite files, or (margin runs) node ids
    variation: tuple[int, int] = (0, 1)  # (seed shift, torch threads per rank)
    subject: str = ""

    @property
    def label(self) -> str:
        if self.kind == "mutant":
            return f"{self.assignment} {self.impl.text}"
        if self.kind == "partial":
            return f"{self.assignment} solution with only {self.subject} stubbed"
        if self.kind == "margin":
            return f"{self.assignment} solution ({variation_text(self.variation)})"
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


@dataclass
class MarginReport:
    """The worst margins of an assignment's solution runs: {(test node id): (ratio, where)}."""

    worst: dict[str, tuple[float, str]] = field(default_factory=dict)

    def add(self, run: RunResult, variation: tuple[int, int]) -> None:
        for t in _graded(run):
            if t.margin is None:
                continue
            where = f"{t.margin_at} [{variation_text(variation)}]"
            if t.nodeid not in self.worst or t.margin > self.worst[t.nodeid][0]:
                self.worst[t.nodeid] = (t.margin, where)

    def breaches(self) -> list[str]:
        return [
            f"{nodeid}: the solution uses {ratio:.2f} of its tolerance at {where}; above "
            f"{MAX_MARGIN} it passes by luck (derive the bound in grader/compare.py)"
            for nodeid, (ratio, where) in sorted(self.worst.items())
            if ratio > MAX_MARGIN
        ]

    @property
    def worst_ratio(self) -> float:
        return max((ratio for ratio, _ in self.worst.values()), default=0.0)

    def summary(self) -> str:
        if not self.worst:
            return "no toleranced comparison"
        nodeid, (ratio, where) = max(self.worst.items(), key=lambda item: item[1][0])
        return f"worst {ratio:.2f} in {nodeid.rsplit('/', 1)[-1]}: {where}"


@dataclass
class Verdict:
    """The state of one check of one assignment; `breaches` empty means it holds."""

    breaches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    ran: bool = False
    sessions: int = 0


def judge_solution(session: Session) -> list[str]:
    """Breaches of "the solution scores full marks"."""
    run, problems = _usable(session, "solution")
    if run is None:
        return problems
    return problems + [
        f"solution fails {t.nodeid}: {t.feedback}" for t in _graded(run) if not t.passed
    ]


def judge_stub(session: Session) -> list[str]:
    """Breaches of "the stub scores zero, every test failing with not implemented"."""
    run, problems = _usable(session, "stub")
    if run is None:
        return problems
    for t in _graded(run):
        if t.passed and not t.points:  # a 0-point gate (the static screen) grades nothing
            continue
        if t.passed:
            problems.append(f"stub passes {t.nodeid}: a test the stub passes grades nothing")
        elif not t.not_implemented:
            problems.append(
                f"stub fails {t.nodeid} for another reason than 'not implemented': {t.feedback}"
            )
    return problems


def judge_mutant(session: Session, name: str) -> tuple[str, list[str]]:
    """(who caught the mutant, breaches): a mutant must fail at least one graded test."""
    run, problems = _usable(session, f"mutant {name}")
    if run is None:
        return "", problems
    failed = [t for t in _graded(run) if not t.passed]
    if not failed:
        return "", problems + [f"mutant {name} passes every test: no test catches it"]
    return f"mutant {name}: caught by {failed[0].nodeid} ({failed[0].feedback})", problems


def judge_points(run: RunResult, assignment: Assignment) -> list[str]:
    """Breaches of "the suites' points add up to the manifest"."""
    tests = [t for t in run.tests if t.assignment == assignment.id]
    total = sum(t.points for t in tests)
    public = sum(t.points for t in tests if t.visibility == "public")
    problems = []
    if total != assignment.points:
        problems.append(
            f"suites carry {total} points, the manifest says points = {assignment.points}"
        )
    if public != assignment.public_points:
        problems.append(
            f"public tests carry {public} points, the manifest says "
            f"public_points = {assignment.public_points}"
        )
    return problems


def check_signatures(assignment: Assignment, root: Path) -> list[str]:
    """Stub vs solution API differences for every module of the assignment."""
    problems = []
    for module in assignment.modules:
        stub = root / "assignments" / assignment.id / f"{module}.py"
        solution = root / "solutions" / assignment.id / f"{module}.py"
        problems += [f"{module}.py: {d}" for d in compare_files(stub, solution)]
    return problems


def mutant_names(assignment_id: str, root: Path) -> list[str]:
    """Names of the mutants of an assignment, sorted (`__init__` and `_private` excluded)."""
    folder = root / "solutions" / assignment_id / "mutants"
    return sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))


def plan(course: Course, ids: list[str], root: Path, suites: Path | None,
         variants: dict[str, Variants] | None = None) -> list[Job]:
    """Every implementation run: solutions, stubs, the partial-credit variants (when
    `variants` holds them), margins, mutants."""
    jobs: list[Job] = []
    for kind in ("solution", "stub", "partial", "margin", "mutant"):
        for assignment in course.select(ids):
            paths = tuple(suite_paths(assignment.id, root, suites))
            if not paths:
                continue
            if kind == "partial":
                found = (variants or {}).get(assignment.id)
                if found is not None:
                    jobs += [Job(assignment.id, "partial", resolve_impl(str(found.path(name))),
                                 paths, subject=name) for name in found.names]
            elif kind == "margin":
                jobs += [Job(assignment.id, "margin", resolve_impl("solutions", root), paths,
                             variation) for variation in MARGIN_RUNS]
            elif kind == "mutant":
                jobs += [
                    Job(assignment.id, "mutant",
                        resolve_impl(f"mutant:{assignment.id}/{name}", root), paths)
                    for name in mutant_names(assignment.id, root)
                ]
            else:
                impl = "solutions" if kind == "solution" else "assignments"
                jobs.append(Job(assignment.id, kind, resolve_impl(impl, root), paths))
    return jobs


@dataclass(frozen=True)
class Batch:
    """Jobs graded by one pytest session: one implementation each, or several at once."""

    jobs: tuple[Job, ...]

    @property
    def label(self) -> str:
        if len(self.jobs) == 1:
            return self.jobs[0].label
        return f"{self.jobs[0].assignment}: {len(self.jobs)} implementations in one session"


def batches(todo: list[Job], *, together: bool = True) -> list[Batch]:
    """Group the jobs into sessions. `together`: per assignment, the solution, the stub and
    every mutant share one session (grader/plugin.py grades several implementations in one
    pytest session); the margin runs keep their own, since their seeds shape collection.
    Otherwise one session per job (the old way, kept for `bench selfcheck`). Longest first."""
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
            *, jobs: int, timeout: float, root: Path, suites: Path | None) -> None:
    """Run the sessions `jobs` at a time, handing each finished batch to `on_batch`.

    The margin runs wait for their assignment's solution run and rerun only the tests that
    compared a value with a tolerance there (the others have no margin to show); with none,
    they are not run and `on_batch` gets no view of them.
    """
    def margins_only(batch: Batch) -> bool:
        return all(job.kind == "margin" for job in batch.jobs)

    deferred: dict[str, list[Batch]] = {}
    for batch in filter(margins_only, sessions):
        deferred.setdefault(batch.jobs[0].assignment, []).append(batch)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        def submit(batch: Batch) -> Future:
            future = pool.submit(run_batch, batch, timeout=timeout, root=root, suites=suites)
            owners[future] = batch
            return future

        owners: dict[Future, Batch] = {}
        pending = {submit(b) for b in sessions if not margins_only(b)}
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    views = future.result()
                    on_batch(owners.pop(future), views)
                    for job, session in views:
                        if job.kind != "solution":
                            continue
                        for batch in deferred.pop(job.assignment, []):
                            narrowed = narrow_to_margins(batch, session.result)
                            if narrowed is not None:
                                pending.add(submit(narrowed))
        except BaseException:  # Ctrl-C or SIGTERM: end the running sessions, start no more
            pool.shutdown(wait=False, cancel_futures=True)
            stop_all_sessions()
            raise


def narrow_to_margins(batch: Batch, solution: RunResult | None) -> Batch | None:
    """The margin batch limited to the tests that recorded a margin in the solution's run
    (all of them when that run gave no results; None when no test compared with a tolerance)."""
    if solution is None:
        return batch
    nodeids = tuple(t.nodeid for t in solution.tests if t.margin is not None)
    if not nodeids:
        return None
    return Batch(tuple(replace(job, paths=nodeids) for job in batch.jobs))


def run_batch(batch: Batch, *, timeout: float, root: Path, suites: Path | None
              ) -> list[tuple[Job, Session]]:
    """Run one session for the batch; each job's view of it, with the session's wall time
    shared out by the time each implementation's tests took (start-up to the first)."""
    first = batch.jobs[0]
    impls = [job.impl for job in batch.jobs]
    stop = [job.impl for job in batch.jobs if job.kind == "mutant"]
    session = run_session(first.paths, impls if len(impls) > 1 else impls[0],
                          stop_first=stop if len(impls) > 1 else bool(stop),
                          timeout=timeout + 60.0 * (len(impls) - 1), root=root, suites=suites,
                          extra=first.extra_args)
    if len(batch.jobs) == 1:
        return [(first, session)]
    views = [session.for_impl(job.impl) for job in batch.jobs]
    spent = [view.result.duration if view.result else 0.0 for view in views]
    overhead = max(session.wall_s - sum(spent), 0.0)
    return [(job, replace(view, wall_s=seconds + (overhead if i == 0 else 0.0)))
            for i, (job, view, seconds) in enumerate(zip(batch.jobs, views, spent))]


def selfcheck(
    course: Course,
    ids: list[str],
    root: Path,
    suites: Path | None = None,
    jobs: int = 2,
    timeout: float = 600.0,
    echo: Callable[[str], None] = print,
    together: bool = True,
) -> int:
    """Run every check, print progress and the table; 0 when nothing is breached, else 1."""
    started = time.perf_counter()
    assignments = course.select(ids)
    verdicts = {a.id: {c: Verdict() for c in CHECKS} for a in assignments}
    runs = {a.id: AssignmentRuns(margins=MarginReport()) for a in assignments}
    for a in assignments:
        start = time.perf_counter()
        verdicts[a.id]["signatures"].breaches += check_signatures(a, root)
        verdicts[a.id]["signatures"].seconds = time.perf_counter() - start
        verdicts[a.id]["signatures"].ran = True
        paths = suite_paths(a.id, root, suites)
        if not paths:
            verdicts[a.id]["points"].breaches.append(
                f"no tests: neither assignments/{a.id}/test_public.py nor a hidden suite exists"
            )
        elif a.public_points and not any(p.name == "test_public.py" for p in paths):
            verdicts[a.id]["points"].breaches.append(
                f"assignments/{a.id}/test_public.py is missing"
            )
        if not mutant_names(a.id, root):
            verdicts[a.id]["mutants"].breaches.append(
                f"solutions/{a.id}/mutants/ has no mutant, so nothing shows the suites catch bugs"
            )
    _check_worksheets(assignments, root, suites, verdicts, echo)
    variants = {a.id: make_variants(a, root) for a in assignments
                if suite_paths(a.id, root, suites)}
    try:
        return _run_sessions(course, ids, root, suites, jobs, timeout, echo, together, started,
                             verdicts, runs, variants)
    finally:
        for found in variants.values():
            found.cleanup()


def _run_sessions(course: Course, ids: list[str], root: Path, suites: Path | None, jobs: int,
                  timeout: float, echo: Callable[[str], None], together: bool, started: float,
                  verdicts: dict[str, dict[str, Verdict]], runs: dict[str, AssignmentRuns],
                  variants: dict[str, Variants]) -> int:
    assignments = course.select(ids)
    todo = plan(course, ids, root, suites, variants)
    sessions = batches(todo, together=together)
    echo(f"selfcheck: {len(assignments)} assignment(s), {len(todo)} implementation run(s) in "
         f"{len(sessions)} pytest session(s), {jobs} at a time")
    done = 0

    def record(batch: Batch, views: list[tuple[Job, Session]]) -> None:
        nonlocal done
        for job, session in views:
            done += 1
            line = _record(job, session, verdicts[job.assignment], course, runs[job.assignment],
                           root)
            echo(f"[{done:>{len(str(len(todo)))}}/{len(todo)}] {line}")

    run_all(sessions, record, jobs=jobs, timeout=timeout, root=root, suites=suites)
    for aid, found in runs.items():
        report = found.margins
        verdicts[aid]["margins"].breaches += report.breaches()
        if report.worst:
            verdicts[aid]["margins"].notes.append(f"{report.worst_ratio:.2f}")
    tables = _judge_partial(runs, variants, verdicts)
    echo("")
    echo(_table(verdicts))
    echo("\nTolerance margins (observed error / tolerance, the solution over "
         f"{1 + len(MARGIN_RUNS)} runs; at most {MAX_MARGIN}):")
    for aid, found in runs.items():
        echo(f"  {aid}: {found.margins.summary()}")
    echo("\nPartial credit (the solution with one public name stubbed; points of the tests that "
         "declare it, of those that may fail with it, and lost):")
    for aid, table in tables.items():
        echo(f"  {aid}:")
        echo("\n".join(f"    {line}" for line in table.splitlines()))
    breaches = [
        f"{aid} {check}: {b}"
        for aid, checks in verdicts.items()
        for check, verdict in checks.items()
        for b in verdict.breaches
    ]
    elapsed = time.perf_counter() - started
    if breaches:
        echo("\nBreaches:")
        echo("\n".join(f"  - {b}" for b in breaches))
        echo(f"\nselfcheck FAILED: {len(breaches)} breach(es) in {elapsed:.0f} s")
        return 1
    echo(f"\nselfcheck passed in {elapsed:.0f} s")
    return 0


def _check_worksheets(assignments: tuple[Assignment, ...], root: Path, suites: Path | None,
                      verdicts: dict[str, dict[str, Verdict]],
                      echo: Callable[[str], None]) -> None:
    """The worksheet check of every assignment with worksheet points, in one nbgrader batch."""
    from grader.instructor.worksheets import check_worksheets

    start = time.perf_counter()
    found = check_worksheets(assignments, root, suites, echo=lambda line: echo(f"  {line}"))
    graded = [a for a in assignments if a.worksheet_points or found.get(a.id)]
    for a in graded:
        verdict = verdicts[a.id]["worksheet"]
        verdict.breaches += found.get(a.id, [])
        verdict.ran = True
        verdict.seconds = (time.perf_counter() - start) / len(graded)


@dataclass
class AssignmentRuns:
    """What the checks judged after every session has ended need of an assignment's runs."""

    margins: MarginReport
    solution: RunResult | None = None
    partial: dict[str, RunResult | None] = field(default_factory=dict)


def _judge_partial(runs: dict[str, AssignmentRuns], variants: dict[str, Variants],
                   verdicts: dict[str, dict[str, Verdict]]) -> dict[str, str]:
    """The partial-credit verdict of each assignment, and its table."""
    tables = {}
    for aid, found in variants.items():
        verdict = verdicts[aid]["partial"]
        solution = runs[aid].solution
        if solution is not None:
            verdict.breaches += undeclared(solution)
        rows = [judge_partial(name, runs[aid].partial.get(name), solution,
                              found.dependants[name]) for name in found.names]
        for row in rows:
            verdict.breaches += row.breaches
        good = sum(not row.breaches for row in rows)
        verdict.notes.append(f"{good}/{len(rows)}")
        verdict.ran = True
        tables[aid] = format_table(
            ["stubbed", "declared", "may lose", "lost", "verdict"],
            [[row.name, row.declared, row.allowed, row.lost, "ok" if not row.breaches else
              f"✗ {len(row.breaches)}"] for row in rows])
    return tables


def _record(job: Job, session: Session, checks: dict[str, Verdict], course: Course,
            runs: AssignmentRuns, root: Path) -> str:
    """Judge a finished session into the assignment's verdicts; returns a progress line."""
    if job.kind in ("solution", "margin") and session.result is not None:
        runs.margins.add(session.result, job.variation)
    if job.kind == "solution":
        runs.solution = session.result
    if job.kind == "partial":
        runs.partial[job.subject] = session.result
        breaches = [f"{job.subject}: {problem}" for problem in
                    ([session.problem] if session.problem else [])]
        verdict = checks["partial"]
    elif job.kind == "margin":
        breaches = [f"with {variation_text(job.variation)}: {b}"
                    for b in judge_solution(session)]
        verdict = checks["margins"]
    elif job.kind == "mutant":
        name = job.impl.mutant_name
        caught, breaches = judge_mutant(session, name)
        verdict = checks["mutants"]
        if caught:
            verdict.notes.append(caught)
            feedback = checks["feedback"]
            said = next(t.feedback for t in _graded(session.result) if not t.passed) \
                if session.result is not None else ""
            wanted = expected_feedback(root / "solutions" / job.assignment / "mutants" /
                                       f"{name}.py")
            problem = feedback_breach(name, wanted, said)
            feedback.breaches += [problem] if problem else []
            feedback.notes.append(name)
            feedback.ran = True
            feedback.sessions += 1
    else:
        breaches = judge_solution(session) if job.kind == "solution" else judge_stub(session)
        verdict = checks[job.kind]
        points = checks["points"]
        if session.result is not None and not points.ran:
            points.breaches += judge_points(session.result, course.get(job.assignment))
            points.ran = True
    verdict.breaches += breaches
    verdict.seconds += session.wall_s
    verdict.ran = True
    verdict.sessions += 1
    status = "ok" if not breaches else f"BREACH: {breaches[0]}"
    if job.kind == "mutant" and caught:
        status = caught.split(": ", 1)[1]
    return f"{job.label}: {status} ({session.wall_s:.1f} s)"


def _table(verdicts: dict[str, dict[str, Verdict]]) -> str:
    rows = []
    for aid, checks in verdicts.items():
        row: list[object] = [aid]
        for check in CHECKS:
            verdict = checks[check]
            mark = "✗" if verdict.breaches else ("✓" if verdict.ran else "-")
            if check == "margins" and verdict.ran and verdict.notes:
                mark += f" {verdict.notes[0]}"
            if check in ("partial", "feedback") and verdict.ran:
                good = (verdict.sessions - len(verdict.breaches) if check == "feedback"
                        else None)
                mark += (f" {max(good or 0, 0)}/{verdict.sessions}" if check == "feedback"
                         else f" {verdict.notes[-1]}" if verdict.notes else "")
            if check == "mutants" and verdict.ran:
                mark += f" {len(verdict.notes)}/{verdict.sessions} caught"
            row.append(mark)
        row.append(f"{sum(v.seconds for v in checks.values()):.1f} s")
        rows.append(row)
    return format_table(["assignment", *CHECKS, "time"], rows)


def _usable(session: Session, what: str) -> tuple[RunResult | None, list[str]]:
    """The run if it can be judged, plus breaches about the session itself."""
    problems = []
    if session.timed_out:
        problems.append(f"{what}: the session hung and was killed: {session.problem}")
    elif session.problem:
        problems.append(f"{what}: {session.problem}")
    run = session.result
    if run is not None:
        problems += [f"{what}: collection error: {error_summary(e)}"
                     for e in run.collection_errors]
        if not run.tests:
            problems.append(f"{what}: no graded test was collected")
    if run is None and not problems:
        problems.append(f"{what}: the session produced no results")
    return run, problems


def _graded(run: RunResult) -> list:
    """Tests that count on this machine (GPU-only tests skipped here do not)."""
    return [t for t in run.tests if not t.not_graded_here]


# --- command line -----------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> None:
    """`python -m grader selfcheck [ID ...] [--suites DIR] [-j N] [--timeout S]`."""
    check = sub.add_parser("selfcheck", help="prove the suites against solutions, stubs, mutants")
    check.add_argument("ids", nargs="*", metavar="ID", help="assignments (default: all)")
    check.add_argument("--suites", type=Path, default=None,
                       help="folder of hidden suites, <suites>/<id>/ (default: grader/suites)")
    check.add_argument("-j", "--jobs", type=int, default=2,
                       help="pytest sessions run side by side (default: 2)")
    check.add_argument("--timeout", type=float, default=600.0,
                       help="seconds before one session is killed as hung (default: 600; a "
                            "session of several implementations gets 60 s more for each)")
    check.add_argument("--session-per-impl", action="store_true",
                       help="one pytest session per implementation (the old way; slower)")
    check.set_defaults(handler=_command)


def _command(args: argparse.Namespace, course: Course) -> int:
    suites = args.suites.resolve() if args.suites is not None else None
    return selfcheck(course, args.ids, args.root, suites, jobs=args.jobs, timeout=args.timeout,
                     echo=lambda line: print(line, flush=True),
                     together=not args.session_per_impl)

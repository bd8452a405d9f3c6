"""`python -m grader selfcheck`: prove that each assignment's suites grade what they claim.

Per assignment, these checks (docs/design.md, principle 5):

- signatures: every module in the manifest's `modules` has the same public names and
  signatures in the stub and the solution (read with `ast`, never imported);
- points: collected points (public + hidden) equal the manifest's `points`, and the public
  suite's points equal `public_points`;
- solution: the reference solution passes every graded test, and no expected value the
  parent compares its answers with was among the launch arguments sent to the ranks
  (`grader/leakcheck.py`: ranks get inputs, never verdicts);
- stub: every graded test fails with "not implemented" — a crash, a hang, a pass or a failure
  for another reason is a breach;
- independent: the independent correct implementation in `grader/tests/independent/<id>/`
  (written from the stubs' docstrings and the README by someone else) gets every point, less
  the optional parts its `NOT_ATTEMPTED` lists, which must score nothing (fairness);
- mutants: every `solutions/<id>/mutants/<name>.py` fails at least one test (run with `-x`;
  the test that caught it is printed);
- margins: the solution also passes with every seed shifted and with 2 torch threads per rank
  (`MARGIN_RUNS`; the third draw only for tests whose graded margin reached `REDRAW_FLOOR`),
  and over all those runs no comparison uses more than half its tolerance (observed error /
  tolerance ≤ `grader.compare.MAX_MARGIN`); the worst margin is printed;
- worksheet: the nbgrader worksheet's source scores full marks, its committed student version
  is up to date, scores zero and holds no solution or hidden test
  (`grader/instructor/worksheets.py`).

Per assignment, one pytest session grades the solution, the stub and every mutant (the plugin
parametrizes each test over the implementations, and stops each mutant at its first failure);
the margin runs of the assignments whose solution runs are done share sessions, one per free
worker and variation (seed shift, threads). Sessions are independent subprocesses; a small
thread pool runs them side by side. `--session-per-impl` runs one session per implementation
instead.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from grader import leakcheck
from grader.instructor import caught_first
from grader.instructor.judges import (
    MarginReport,
    Verdict,
    check_signatures,
    graded,
    judge_independent,
    judge_mutant,
    judge_points,
    judge_solution,
    judge_stub,
    not_attempted,
    usable,
)
from grader.instructor.leak_echoes import is_echo
from grader.instructor.partial import (
    Variants,
    expected_feedback,
    feedback_breach,
    judge_partial,
    make_variants,
    undeclared,
)
from grader.instructor.sessions import (
    MARGIN_RUNS,
    REDRAW_FLOOR,
    Batch,
    Job,
    batches,
    mutant_names,
    narrow_to_margins,
    plan,
    run_all,
    run_batch,
    variation_text,
)
from grader.manifest import Assignment, Course
from grader.report.render import format_table
from grader.report.results import RunResult
from grader.session.runner import Session, suite_paths

__all__ = ["CHECKS", "MARGIN_RUNS", "Batch", "Job", "MarginReport", "Verdict", "batches",
           "judge_mutant", "judge_points", "judge_solution", "judge_stub", "mutant_names",
           "narrow_to_margins", "plan", "run_all", "run_batch", "selfcheck", "usable",
           "variation_text"]


CHECKS = ("signatures", "points", "solution", "stub", "independent", "mutants", "feedback",
          "partial", "margins", "worksheet")


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
    # The worksheet check (nbgrader: kernel starts, a gradebook) runs beside the sessions and
    # fills the moments they wait; its verdicts are in before the table is made.
    wait_worksheets = _beside(_check_worksheets, assignments, root, suites, verdicts, echo)
    variants = {a.id: make_variants(a, root) for a in assignments
                if suite_paths(a.id, root, suites)}
    ledger = tempfile.mkdtemp(prefix="mlsys-leakcheck-")
    before = os.environ.get(leakcheck.ENV)
    os.environ[leakcheck.ENV] = os.path.join(ledger, "findings.jsonl")  # sessions inherit it
    try:
        return _run_sessions(course, ids, root, suites, jobs, timeout, echo, together, started,
                             verdicts, runs, variants, wait_worksheets)
    finally:
        if before is None:
            os.environ.pop(leakcheck.ENV, None)
        else:
            os.environ[leakcheck.ENV] = before
        shutil.rmtree(ledger, ignore_errors=True)
        for found in variants.values():
            found.cleanup()


def _judge_leaks(verdicts: dict[str, dict[str, Verdict]]) -> None:
    """Expected values the sessions' parents compared against that were sent to ranks
    (grader/leakcheck.py): a breach of the solution check of the test's assignment."""
    seen = set()
    for finding in leakcheck.findings(os.environ.get(leakcheck.ENV, "")):
        test, sent = str(finding.get("test", "")), str(finding.get("sent", ""))
        aid = next((a for a in verdicts if f"/{a}/" in f"/{test}"), None)
        if aid is None or (test, sent) in seen or is_echo(test, sent):
            continue
        seen.add((test, sent))
        verdicts[aid]["solution"].breaches.append(
            f"{test} compares a rank's answer with an expected value that was sent to the "
            f"ranks ({sent}): ranks get inputs, never verdicts; judge in the parent")


def _run_sessions(course: Course, ids: list[str], root: Path, suites: Path | None, jobs: int,
                  timeout: float, echo: Callable[[str], None], together: bool, started: float,
                  verdicts: dict[str, dict[str, Verdict]], runs: dict[str, AssignmentRuns],
                  variants: dict[str, Variants], wait_worksheets: Callable[[], None]) -> int:
    assignments = course.select(ids)
    todo = plan(course, ids, root, suites, variants)
    sessions = batches(todo, together=together)
    echo(f"selfcheck: {len(assignments)} assignment(s), {len(todo)} implementation run(s) in "
         f"{len(sessions)} pytest session(s), {jobs} at a time")
    done = 0
    work: dict[str, list[int]] = {a.id: [0, 0, 0] for a in assignments}  # sessions, launches, tests

    def record(batch: Batch, views: list[tuple[Job, Session]]) -> None:
        nonlocal done
        count_work(work, views)
        for job, session in views:
            done += 1
            line = _record(job, session, verdicts[job.assignment], course, runs[job.assignment],
                           root)
            echo(f"[{done:>{len(str(len(todo)))}}/{len(todo)}] {line}")

    run_all(sessions, record, jobs=jobs, timeout=timeout, root=root, suites=suites,
            merge_margins=together)
    wait_worksheets()
    _judge_leaks(verdicts)
    for aid, found in runs.items():  # the next run starts each mutant with its catcher
        if caught_first.save(root, aid, found.caught, mutant_names(aid, root)):
            echo(f"  {caught_first.record_path(root, aid).relative_to(root)}: updated")
    for aid, found in runs.items():
        report = found.margins
        verdicts[aid]["margins"].breaches += report.breaches()
        if report.worst:
            verdicts[aid]["margins"].notes.append(f"{report.worst_ratio:.2f}")
    tables = _judge_partial(runs, variants, verdicts)
    echo("")
    echo(_table(verdicts))
    from grader.compare import MAX_MARGIN  # torch: imported once the sessions are done

    echo("\nTolerance margins (observed error / tolerance, the solution over "
         f"up to {1 + len(MARGIN_RUNS)} runs, a third only at {REDRAW_FLOOR} or more; at most "
         f"{MAX_MARGIN}):")
    for aid, found in runs.items():
        echo(f"  {aid}: {found.margins.summary()}")
    echo("\nWork (pytest sessions, harness launches, tests run; counts, not seconds): " + "; ".join(
        f"{aid} {s} / {n} / {t}" for aid, (s, n, t) in work.items()))
    unstated = {aid: checks["feedback"].notes for aid, checks in verdicts.items()
                if checks["feedback"].notes}
    if unstated:
        echo("\nMutants that state no FEEDBACK yet (the feedback column's +N?; write what a "
             "student with the bug must be told):")
        for aid, names in unstated.items():
            echo(f"  {aid}: {', '.join(names)}")
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


def count_work(work: dict[str, list[int]], views: list[tuple[Job, Session]]) -> None:
    """Add one finished session to `work` (assignment -> [sessions, launches, tests run]): its
    launches (the plugin's count, per session) go to the assignment of its first job; the tests
    each implementation ran (not inferred, not skipped as not run) to their own."""
    if not views:
        return
    first = views[0][1].result
    launches = int(dict(first.timing).get("launches", 0)) if first is not None else 0
    owner = work.setdefault(views[0][0].assignment, [0, 0, 0])
    owner[0] += 1
    owner[1] += launches
    for job, session in views:
        if session.result is not None:
            work.setdefault(job.assignment, [0, 0, 0])[2] += sum(
                not t.inferred and t.outcome != "skipped" for t in session.result.tests)


def _beside(fn: Callable[..., object], *args: object) -> Callable[[], None]:
    """Start `fn(*args)` in a daemon thread; the function returned waits for it and raises
    what it raised (a daemon, so Ctrl-C does not wait for nbgrader)."""
    done: Future = Future()

    def run() -> None:
        try:
            done.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            done.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return lambda: done.result()


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
    caught: dict[str, str] = field(default_factory=dict)  # mutant -> the test that caught it


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
    elif job.kind == "independent":
        breaches = judge_independent(session, not_attempted(root, job.assignment))
        verdict = checks["independent"]
    elif job.kind == "mutant":
        name = job.impl.mutant_name
        caught, breaches = judge_mutant(session, name)
        verdict = checks["mutants"]
        if caught:
            verdict.notes.append(caught)
            feedback = checks["feedback"]
            catcher = next(t for t in graded(session.result) if not t.passed) \
                if session.result is not None else None
            said = catcher.feedback if catcher is not None else ""
            if catcher is not None:  # the next run starts this mutant with it
                runs.caught[name] = catcher.nodeid
            wanted = expected_feedback(root / "solutions" / job.assignment / "mutants" /
                                       f"{name}.py")
            feedback.ran = True
            if not wanted:  # listed below the table until the mutant states it
                feedback.notes.append(name)
            else:
                problem = feedback_breach(name, wanted, said)
                feedback.breaches += [problem] if problem else []
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
    inferred = sum(t.inferred for t in session.result.tests) if session.result else 0
    taken = f"; {inferred} test(s) not rerun, as they ran none of what it changes" \
        if inferred else ""
    return f"{job.label}: {status} ({session.wall_s:.1f} s{taken})"


def _table(verdicts: dict[str, dict[str, Verdict]]) -> str:
    rows = []
    for aid, checks in verdicts.items():
        row: list[object] = [aid]
        for check in CHECKS:
            verdict = checks[check]
            mark = "✗" if verdict.breaches else ("✓" if verdict.ran else "-")
            if check == "margins" and verdict.ran and verdict.notes:
                mark += f" {verdict.notes[0]}"
            if check == "feedback" and verdict.ran:
                mark += f" {max(verdict.sessions - len(verdict.breaches), 0)}/{verdict.sessions}"
                mark += f" +{len(verdict.notes)}?" if verdict.notes else ""
            if check == "partial" and verdict.ran and verdict.notes:
                mark += f" {verdict.notes[-1]}"
            if check == "mutants" and verdict.ran:
                mark += f" {len(verdict.notes)}/{verdict.sessions} caught"
            row.append(mark)
        row.append(f"{sum(v.seconds for v in checks.values()):.1f} s")
        rows.append(row)
    return format_table(["assignment", *CHECKS, "time"], rows)


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

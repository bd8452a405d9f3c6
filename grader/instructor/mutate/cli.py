"""`python -m grader mutate <id> [--limit N] [--jobs 2] [--batch-size 16] [--list]`: the mutation
score.

`--list` prints the generated mutants and runs nothing. A run grades the unmutated solution
first (laid out as the mutants are, so the layout is proven), then every mutant not listed as
equivalent — a batch of mutants per pytest session (grader/instructor/mutate/batch.py) — and
writes `<out>/mutation/<id>.md`; a full run (no `--limit`) also writes the
committed summary `solutions/<id>/mutation_summary.json`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from grader.instructor.mutate.batch import BatchEngine
from grader.instructor.mutate.equivalents import Equivalent, EquivalentsError, load_equivalents
from grader.instructor.mutate.generate import Generation, generate
from grader.instructor.mutate.report import MutantResult, MutationReport, write_markdown
from grader.instructor.mutate.runner import (
    BaselineFailed,
    Engine,
    Progress,
    SessionEngine,
    run_baseline,
    run_mutants,
    spread,
)
from grader.instructor.mutate.summary import (
    provided_hash,
    source_hash,
    suite_hash,
    summary_path,
    write_summary,
)
from grader.manifest import Assignment, Course
from grader.session.runner import suite_paths


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("mutate", help="generate mutants of a solution and score the suites "
                            "by how many they kill (instructors; slow)")
    parser.add_argument("ids", nargs=1, metavar="ID", help="the assignment")
    parser.add_argument("--list", action="store_true",
                        help="print the generated mutants (name and change), run nothing")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="run only N mutants spread over the modules (a partial run: "
                        "no summary is written)")
    parser.add_argument("-j", "--jobs", type=int, default=2,
                        help="pytest sessions run side by side (default: 2)")
    parser.add_argument("--batch-size", type=int, default=16, metavar="N",
                        help="mutants graded by one pytest session, at most (default: 16)")
    parser.add_argument("--session-per-mutant", action="store_true",
                        help="one pytest session per mutant (slower; for comparison)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds one mutant may take before it is stopped and counted as "
                        "timed out (default: three times the solution's run plus 60)")
    parser.add_argument("--out", type=Path, default=Path("grading"),
                        help="the report goes to <out>/mutation/<id>.md (default: grading/)")
    parser.add_argument("--suites", type=Path, default=None,
                        help="folder of hidden suites, <suites>/<id>/ (default: grader/suites)")
    parser.set_defaults(handler=_mutate)


def _mutate(args: argparse.Namespace, course: Course) -> int:
    assignment = course.get(args.ids[0])
    try:
        generation = generate(assignment, args.root)
        equivalents = load_equivalents(assignment.id, args.root)
    except (OSError, SyntaxError, EquivalentsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.list:
        print_list(generation, equivalents)
        return 0
    suites = args.suites.resolve() if args.suites is not None else None
    paths = suite_paths(assignment.id, args.root, suites)
    if not paths:
        print(f"error: {assignment.id} has no tests to run mutants against", file=sys.stderr)
        return 1
    engine: Engine = (SessionEngine(paths, args.root, suites, jobs=args.jobs)
                      if args.session_per_mutant else
                      BatchEngine(paths, args.root, suites, jobs=args.jobs,
                                  batch_size=args.batch_size))
    try:
        report = mutation_run(engine, assignment, generation, equivalents, args.root,
                              limit=args.limit, timeout=args.timeout,
                              echo=lambda line: print(line, flush=True))
    except BaselineFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print()
    print(report.table())
    print(f"\n{assignment.id}: {report.score_line()}")
    written = write_markdown(report, args.out)
    print(f"report written to {written}")
    if report.complete:
        print(f"summary written to {write_summary(report.summary(), args.root)} (commit it)")
    else:
        print(f"partial run (--limit): {summary_path(assignment.id, args.root)} left as it was")
    return 0


def print_list(generation: Generation, equivalents: dict[str, Equivalent]) -> None:
    """One line per mutant: name, change, and whether it is stillborn or listed equivalent."""
    for mutant in generation.mutants:
        tag = "" if mutant.compiles else "  (stillborn)"
        if mutant.mutant_id in equivalents:
            tag = f"  (equivalent: {equivalents[mutant.mutant_id].reason})"
        change = mutant.one_line(generation.sources[mutant.module])
        print(f"{mutant.name}  {change}{tag}")
    by_operator = Counter(m.operator for m in generation.mutants)
    listed = sum(m.mutant_id in equivalents for m in generation.mutants)
    print(f"\n{generation.assignment}: {len(generation.mutants)} mutants "
          f"({len(generation.stillborn)} stillborn, {listed} listed as equivalent); "
          + ", ".join(f"{op} {n}" for op, n in sorted(by_operator.items())))


def mutation_run(engine: Engine, assignment: Assignment, generation: Generation,
                 equivalents: dict[str, Equivalent], root: Path, *, limit: int | None = None,
                 timeout: float | None = None,
                 echo: Callable[[str], None] = print) -> MutationReport:
    """Baseline, then every mutant to run; the report (no file written)."""
    started = time.perf_counter()
    results: list[MutantResult] = []
    to_run = []
    for mutant in generation.mutants:
        if not mutant.compiles:
            results.append(MutantResult(mutant, "stillborn"))
        elif mutant.mutant_id in equivalents:
            results.append(MutantResult(mutant, "equivalent",
                                        note=equivalents[mutant.mutant_id].reason))
        else:
            to_run.append(mutant)
    chosen = spread(to_run, limit)
    num_equivalent = sum(r.status == "equivalent" for r in results)
    if len(chosen) < len(to_run):  # a partial run reports on the mutants it ran only
        results = []
    known = {m.mutant_id for m in generation.mutants}
    stale = tuple(e for i, e in sorted(equivalents.items()) if i not in known)
    with tempfile.TemporaryDirectory(prefix=f"mlsys-mutate-{assignment.id}-") as tmp:
        workdir = Path(tmp)
        echo(f"mutate {assignment.id}: {len(generation.mutants)} mutants "
             f"({len(generation.stillborn)} stillborn, "
             f"{num_equivalent} equivalent); running "
             f"{len(chosen)}")
        baseline = run_baseline(engine, assignment, generation, workdir,
                                timeout if timeout is not None else 1800.0)
        limit_s = timeout if timeout is not None else 3 * baseline.wall_s + 60
        echo(f"solution, laid out as a mutant: {baseline.tests} graded tests pass in "
             f"{baseline.wall_s:.1f} s; a mutant is stopped as timed out after {limit_s:.0f} s")
        verdicts = run_mutants(engine, assignment, generation, chosen, workdir, limit_s,
                               Progress(len(chosen), echo))
    order = {m.mutant_id: i for i, m in enumerate(generation.mutants)}
    results += [MutantResult(m, verdicts[m.mutant_id].status, verdicts[m.mutant_id])
                for m in chosen if m.mutant_id in verdicts]
    results.sort(key=lambda r: order[r.mutant.mutant_id])
    return MutationReport(
        assignment=assignment.id, results=tuple(results), sources=generation.sources,
        solution_sha256=source_hash(assignment, root), wall_s=time.perf_counter() - started,
        skipped=len(to_run) - len(chosen), stale_equivalents=stale,
        suite_sha256=suite_hash(assignment, root),
        provided_sha256=provided_hash(assignment, root),
    )

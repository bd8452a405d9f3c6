"""`python -m grader`: grade, selfcheck, list, coursemap and bench.

Exit status: 0 when the command did its job — grading a submission that fails every test is
a job done —; 1 when selfcheck finds a breach or grading hit a grader or collection error;
2 for a bad command line or manifest.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from grader.manifest import REPO_ROOT, Course, ManifestError, load_manifest
from grader.reports import format_table, terminal_report, write_reports
from grader.runner import run_session, suite_paths

_BUILTIN_IMPLS = ("assignments", "solutions")
# Subcommands that live in modules of their own. Each module defines
# `register(sub: argparse._SubParsersAction) -> None`, which adds its parser and sets
# `handler=fn(args, course) -> int`. Instructor-only modules are left out of a student release,
# so their absence is not an error.
_SUBCOMMAND_MODULES: tuple[str, ...] = ("grader.worksheets", "grader.gradebook",
                                        "grader.pr_files", "grader.pr_grade", "grader.pr_comment",
                                        "grader.pr_post", "grader.rehearse")
_INSTRUCTOR_ONLY_MODULES: tuple[str, ...] = ("grader.adversarial", "grader.release",
                                            "grader.mutate")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    # parse_known_args: `bench --help` must reach the benchmark, not argparse.
    args, unknown = parser.parse_known_args(argv)
    if args.command == "bench":
        from grader.bench import main as bench_main

        return bench_main(unknown + list(args.rest))
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.root = args.root.resolve()
    if args.command is None:
        parser.print_help()
        return 2
    try:
        course = load_manifest(args.root / "assignments" / "course.toml")
        for assignment_id in getattr(args, "ids", []):
            course.get(assignment_id)
    except (ManifestError, KeyError) as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    return args.handler(args, course)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m grader", description="Grade, check and benchmark mlsys-labs assignments."
    )
    parser.add_argument(
        "--root", type=Path, default=REPO_ROOT,
        help="course checkout to work on (default: the one holding this grader)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    grade = sub.add_parser("grade", help="run public + hidden suites and write reports")
    grade.add_argument("ids", nargs="*", metavar="ID", help="assignments (default: all)")
    grade.add_argument(
        "--impl", default="assignments",
        help="assignments | solutions | mutant:<id>/<name> | a directory laid out like "
        "assignments/ (default: assignments)",
    )
    grade.add_argument("--out", type=Path, default=Path("grading"),
                       help="where results.json, summary.md and junit.xml go (default: grading/)")
    grade.add_argument("--suites", type=Path, default=None,
                       help="folder of hidden suites, <suites>/<id>/ (default: grader/suites)")
    grade.add_argument("-n", "--workers", type=int, default=2,
                       help="pytest-xdist workers (0: run in one process; default: 2)")
    grade.add_argument("--timeout", type=float, default=1800.0,
                       help="seconds before the whole session is killed (default: 1800)")
    grade.add_argument("--sandbox", choices=("off", "on", "strict"), default="off",
                       help="run rank processes in the sandbox (harness/sandbox.py): on = as "
                       "much of it as this machine allows, reported in the results; strict = "
                       "refuse to grade without the full sandbox (default: off)")
    grade.add_argument("--select", default=None, metavar="EXPR",
                       help="grade only the tests whose names match this pytest -k expression")
    grade.add_argument("--no-worksheets", action="store_true",
                       help="skip the nbgrader worksheets (they are skipped with --select too)")
    grade.set_defaults(handler=_grade)

    check = sub.add_parser("selfcheck", help="prove the suites against solutions, stubs, mutants")
    check.add_argument("ids", nargs="*", metavar="ID", help="assignments (default: all)")
    check.add_argument("--suites", type=Path, default=None,
                       help="folder of hidden suites, <suites>/<id>/ (default: grader/suites)")
    check.add_argument("-j", "--jobs", type=int, default=2,
                       help="pytest sessions run side by side (default: 2)")
    check.add_argument("--timeout", type=float, default=600.0,
                       help="seconds before one session is killed as hung (default: 600)")
    check.set_defaults(handler=_selfcheck)

    sub.add_parser("list", help="print the course map").set_defaults(handler=_list)
    sub.add_parser("coursemap", help="print the course map as Markdown (for README.md)") \
        .set_defaults(handler=_coursemap)
    bench = sub.add_parser("bench", help="run a benchmark: bench <name> [args]", add_help=False)
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    for name in _SUBCOMMAND_MODULES + _INSTRUCTOR_ONLY_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if name in _INSTRUCTOR_ONLY_MODULES and exc.name == name:
                continue
            raise
        module.register(sub)
    return parser


def _grade(args: argparse.Namespace, course: Course) -> int:
    impl = _resolve_impl(args.impl)
    if impl is None:
        print(f"error: --impl {args.impl!r} is neither assignments, solutions, "
              "mutant:<id>/<name> nor an existing directory", file=sys.stderr)
        return 2
    suites = args.suites.resolve() if args.suites is not None else None
    paths = []
    for assignment in course.select(args.ids):
        found = suite_paths(assignment.id, args.root, suites)
        if not found:
            print(f"note: {assignment.id} has no tests yet; skipped", file=sys.stderr)
        paths += found
    if not paths:
        print("error: no tests to run", file=sys.stderr)
        return 1
    print(f"grading {impl} on {len(paths)} suite path(s) with {args.workers} worker(s)")
    extra = ["--sandbox", args.sandbox]
    if args.select:
        extra += ["-k", args.select]
    session = run_session(
        paths, impl, workers=args.workers, timeout=args.timeout, root=args.root, suites=suites,
        on_line=_progress_printer(), extra=extra,
    )
    if session.result is None:
        print(f"error: {session.problem}\n--- last lines of the pytest session ---\n"
              f"{session.output_tail}", file=sys.stderr)
        return 1
    titles = {a.id: a.title for a in course.assignments}
    result = session.result
    if not (args.select or args.no_worksheets):
        from grader.worksheets import with_worksheet_results

        result = with_worksheet_results(result, course, args.ids, impl, args.root, suites)
    write_reports(result, args.out, titles, {"name": course.name, "version": course.version})
    print()
    print(terminal_report(result, titles))
    print(f"\nreports written to {args.out}/ (results.json, summary.md, junit.xml)")
    if result.collection_errors:
        print("error: some suites could not be collected (above); run pytest on them "
              "for the traceback", file=sys.stderr)
        return 1
    if session.problem:
        print(f"error: the grading run itself failed: {session.problem}", file=sys.stderr)
        return 1
    return 0


def _resolve_impl(impl: str) -> str | None:
    """The --impl value to pass on (directories made absolute), or None when invalid."""
    if impl in _BUILTIN_IMPLS:
        return impl
    if impl.startswith("mutant:"):
        return impl if "/" in impl.removeprefix("mutant:") else None
    path = Path(impl)
    return str(path.resolve()) if path.is_dir() else None


def _progress_printer():
    """Echo the session's output (the plugin's one line per finished test), indented."""

    def echo(line: str) -> None:
        if line.strip():
            print(f"  {line}", flush=True)

    return echo


def _selfcheck(args: argparse.Namespace, course: Course) -> int:
    from grader.selfcheck import selfcheck

    suites = args.suites.resolve() if args.suites is not None else None
    return selfcheck(course, args.ids, args.root, suites, jobs=args.jobs, timeout=args.timeout,
                     echo=lambda line: print(line, flush=True))


def _list(args: argparse.Namespace, course: Course) -> int:
    try:  # the committed mutation score (instructors only: absent from a student release)
        from grader.mutate.summary import score_text
    except ModuleNotFoundError:
        def score_text(assignment, root):  # type: ignore[misc]
            return "-"
    rows = [
        [i, a.id, a.points, a.public_points, ", ".join(a.prerequisites) or "-",
         score_text(a, args.root), a.part, a.title]
        for i, a in enumerate(course.assignments, start=1)
    ]
    print(f"{course.name} {course.version}")
    headers = ["#", "id", "points", "public", "prerequisites", "mutation", "part", "title"]
    print(format_table(headers, rows))
    return 0


def _coursemap(args: argparse.Namespace, course: Course) -> int:
    print(coursemap_markdown(course), end="")
    return 0


def coursemap_markdown(course: Course) -> str:
    """The course map as a Markdown table, in course order (README.md is checked against it)."""
    lines = [
        "| # | assignment | part | topics | points | worksheet | prerequisites |",
        "|---:|---|---|---|---:|---:|---|",
    ]
    for i, a in enumerate(course.assignments, start=1):
        prerequisites = ", ".join(f"`{p}`" for p in a.prerequisites) or "—"
        lines.append(
            f"| {i} | [`{a.id}`](assignments/{a.id}/README.md): {a.title} | {a.part} "
            f"| {'; '.join(a.topics)} | {a.points} | {a.worksheet_points or '—'} "
            f"| {prerequisites} |"
        )
    return "\n".join(lines) + "\n"

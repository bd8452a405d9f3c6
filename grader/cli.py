"""`python -m grader`: grade, list, coursemap and bench, and the subcommands of the packages.

The subcommands of `grader/pr/`, `grader/worksheets/` and `grader/instructor/` are found in the
packages present: every module there that defines
`register(sub: argparse._SubParsersAction) -> None` adds its parser and sets
`handler=fn(args, course) -> int`. A student release has no `grader/instructor/`, so selfcheck,
release, gradebook and the rest are simply not there.

Exit status: 0 when the command did its job — grading a submission that fails every test is
a job done —; 1 when selfcheck finds a breach or grading hit a grader or collection error;
2 for a bad command line or manifest.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import pkgutil
import sys
import time
import types
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from grader.manifest import REPO_ROOT, Course, ManifestError, load_manifest
from grader.report.render import format_table, terminal_report, write_reports
from grader.session.runner import run_session, suite_paths

# Packages whose modules may add subcommands; a package missing from this checkout adds none.
COMMAND_PACKAGES = ("grader.pr", "grader.worksheets", "grader.instructor")
# Where `--impl` is parsed (resolve_impl) and described (IMPL_HELP).
_IMPL_SOURCE = REPO_ROOT / "harness" / "impl.py"


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
    grade.add_argument("--impl", default="assignments", help=_impl_help())
    grade.add_argument("--out", type=Path, default=Path("grading"),
                       help="where results.json, summary.md and junit.xml go (default: grading/)")
    grade.add_argument("--suites", type=Path, default=None,
                       help="folder of hidden suites, <suites>/<id>/ (default: grader/suites)")
    grade.add_argument("-n", "--workers", type=int, default=None,
                       help="pytest-xdist workers (0: run in one process; default: 0 for one "
                            "assignment, whose launches already keep the cores busy, else 2)")
    grade.add_argument("--timeout", type=float, default=1800.0,
                       help="seconds before the whole session is killed (default: 1800)")
    grade.add_argument("--sandbox", choices=("off", "on", "strict"), default="off",
                       help="run rank processes in the sandbox (harness/sandbox.py): on = as "
                       "much of it as this machine allows, reported in the results; strict = "
                       "refuse to grade without the full sandbox (default: off)")
    grade.add_argument("--screen", choices=("on", "off"), default="on",
                       help="the static screen (grader/screen/scan.py): off = reported but not "
                       "gating; instructors only, to test what lies behind it (default: on)")
    grade.add_argument("--select", default=None, metavar="EXPR",
                       help="grade only the tests whose names match this pytest -k expression")
    grade.add_argument("--no-worksheets", action="store_true",
                       help="skip the nbgrader worksheets (they are skipped with --select too)")
    grade.set_defaults(handler=_grade)

    sub.add_parser("list", help="print the course map").set_defaults(handler=_list)
    sub.add_parser("coursemap", help="print the course map as Markdown (for README.md)") \
        .set_defaults(handler=_coursemap)
    bench = sub.add_parser("bench", help="run a benchmark: bench <name> [args]", add_help=False)
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    for module in command_modules():
        module.register(sub)
    return parser


def command_modules() -> list[types.ModuleType]:
    """The modules of `COMMAND_PACKAGES` present in this checkout that define `register`."""
    found = []
    for package in COMMAND_PACKAGES:
        if importlib.util.find_spec(package) is None:
            continue
        path = importlib.import_module(package).__path__
        for info in pkgutil.iter_modules(path, f"{package}."):
            module = importlib.import_module(info.name)
            if callable(getattr(module, "register", None)):
                found.append(module)
    return found


def _impl_help() -> str:
    """`harness.impl.IMPL_HELP`, read from the file: importing the harness package pulls in
    torch, and the parser is built for every command, pr-comment's torch-free job included."""
    import ast

    tree = ast.parse(_IMPL_SOURCE.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "IMPL_HELP" for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError(f"{_IMPL_SOURCE} defines no IMPL_HELP")


def _grade(args: argparse.Namespace, course: Course) -> int:
    from harness.impl import resolve_impl

    try:
        impl = resolve_impl(args.impl, args.root)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
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
    started = time.perf_counter()
    workers = args.workers if args.workers is not None else (0 if len(course.select(args.ids))
                                                              == 1 else 2)
    print(f"grading {impl.argument} on {len(paths)} suite path(s) with {workers} worker(s)")
    extra = ["--sandbox", args.sandbox, "--screen", args.screen]
    if args.select:
        extra += ["-k", args.select]
    # The worksheets (nbgrader, seconds of kernel start-up) are graded beside the suites.
    worksheets: Future | None = None
    pool = ThreadPoolExecutor(max_workers=1)
    if not (args.select or args.no_worksheets):
        # Kept per notebook hash for local runs; the sandboxed (trusted) grading keeps none.
        cache = args.root / "grading" / "worksheet-cache" if args.sandbox == "off" else None
        worksheets = pool.submit(_grade_worksheets, course, args.ids, impl, args.root, suites,
                                 cache)
    try:
        session = run_session(
            paths, impl, workers=workers, timeout=args.timeout, root=args.root, suites=suites,
            on_line=_progress_printer(), extra=extra,
        )
        extra_tests, worksheet_s = worksheets.result() if worksheets else ((), 0.0)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    if session.result is None:
        print(f"error: {session.problem}\n--- last lines of the pytest session ---\n"
              f"{session.output_tail}", file=sys.stderr)
        return 1
    titles = {a.id: a.title for a in course.assignments}
    result = with_extra_tests(session.result, extra_tests)
    write_reports(result, args.out, titles, {"name": course.name, "version": course.version})
    print()
    print(terminal_report(result, titles))
    print(time_breakdown(time.perf_counter() - started, session.wall_s, dict(result.timing),
                         worksheet_s))
    print(f"\nreports written to {args.out}/ (results.json, summary.md, junit.xml)")
    if result.collection_errors:
        print("error: some suites could not be collected (above); run pytest on them "
              "for the traceback", file=sys.stderr)
        return 1
    if session.problem:
        print(f"error: the grading run itself failed: {session.problem}", file=sys.stderr)
        return 1
    return 0


def _grade_worksheets(course: Course, ids: list[str], impl: Any, root: Path,
                      suites: Path | None, cache: Path | None = None) -> tuple[Any, float]:
    """(worksheet rows, or the WorksheetError of a malformed source; seconds it took)."""
    from grader.worksheets.grading import WorksheetError, grade_worksheets

    start = time.perf_counter()
    try:
        rows: Any = grade_worksheets(course, ids, impl, root, suites, echo=lambda line: None,
                                     cache=cache)
    except WorksheetError as exc:
        rows = exc
    return rows, time.perf_counter() - start


def with_extra_tests(run: Any, extra: Any) -> Any:
    """`run` with the worksheet rows added (or, when grading them failed, the reason as a
    collection error: the instructor's problem, said so)."""
    from dataclasses import replace

    if isinstance(extra, Exception):
        return replace(run, collection_errors=run.collection_errors + (f"worksheets: {extra}",))
    return replace(run, tests=run.tests + tuple(extra))


def time_breakdown(total_s: float, session_s: float, timing: dict[str, float],
                   worksheet_s: float) -> str:
    """One line: where a grade's time went. `timing` is the plugin's (grader/session/plugin.py); the
    worksheets run beside the pytest session; under xdist the forkserver and launch seconds
    are summed over the workers, which run side by side."""
    startup = max(session_s - timing.get("session", session_s), 0.0) + timing.get("collected", 0.0)
    forkserver, launches = timing.get("forkserver_s", 0.0), timing.get("launch_s", 0.0)
    outside = max(total_s - launches, 0.0)
    share = f"{100 * outside / total_s:.0f}%" if total_s else "-"
    return (f"time: {total_s:.1f} s — suites {session_s:.1f} s (start-up and collection "
            f"{startup:.1f} s, forkserver {forkserver:.1f} s, launches {launches:.1f} s), "
            f"worksheets beside them {worksheet_s:.1f} s; outside launches: {share}")


def _progress_printer():
    """Echo the session's output (the plugin's one line per finished test), indented."""

    def echo(line: str) -> None:
        if line.strip():
            print(f"  {line}", flush=True)

    return echo


def _list(args: argparse.Namespace, course: Course) -> int:
    try:  # the committed mutation score (instructors only: absent from a student release)
        from grader.instructor.mutate.summary import score_text
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

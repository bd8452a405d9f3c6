"""`python -m grader doctor [ID ...]`: is each assignment complete and consistent?

Runs the checks of `checks.CHECKS` on every selected assignment of the manifest (all of them
by default), prints a table per assignment (check, status, first finding) and then every
finding in full. Exit status 1 when any check found an error — the lines starting `doctor:`
name each missing or inconsistent artefact —, 0 otherwise (warnings are shown, never fail).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from grader.instructor.authoring.checks import CHECKS, ERROR, WARN, Finding
from grader.manifest import Assignment, Course
from grader.report.render import format_table


def diagnose(assignment: Assignment, course: Course, root: Path) -> dict[str, list[Finding]]:
    """The findings of every check on one assignment, by check name, in `CHECKS` order."""
    return {name: check(assignment, course, root) for name, check in CHECKS}


def errors_of(report: dict[str, list[Finding]]) -> list[str]:
    """`<check>: <message>` for each error of a `diagnose` report."""
    return [f"{name}: {f.message}" for name, found in report.items()
            for f in found if f.level == ERROR]


def render(assignment: Assignment, report: dict[str, list[Finding]]) -> str:
    """The table of one assignment: one row per check."""
    rows = []
    for name, found in report.items():
        errors = [f for f in found if f.level == ERROR]
        warnings = [f for f in found if f.level == WARN]
        status = "FAIL" if errors else ("warn" if warnings else "ok")
        first = (errors or warnings)[0].message if found else ""
        more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
        rows.append([name, status, _clip(first, 90) + more])
    return f"{assignment.id}: {assignment.title}\n" + format_table(
        ["check", "status", "finding"], rows)


def run_doctor(course: Course, ids: Sequence[str], root: Path, *, quiet: bool = False,
               echo: Callable[[str], None] = print) -> int:
    """Check the selected assignments, print their tables and findings; the exit status.
    `quiet`: only the errors and the last line (how `make test` runs it)."""
    failed = []
    for assignment in course.select(list(ids)):
        report = diagnose(assignment, course, root)
        if not quiet:
            echo(render(assignment, report) + "\n")
        for name, found in report.items():
            for f in found:
                if f.level == ERROR or not quiet:
                    tag = "doctor" if f.level == ERROR else "warning"
                    echo(f"{tag}: {assignment.id}: {name}: {f.message}")
        if not quiet:
            echo("")
        if errors_of(report):
            failed.append(f"{assignment.id} ({len(errors_of(report))})")
    if failed:
        echo(f"doctor: errors in {', '.join(failed)}")
        return 1
    echo(f"doctor: {len(course.select(list(ids)))} assignment(s) complete and consistent")
    return 0


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def register_doctor(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("doctor", help="check that assignments are complete and consistent "
                            "(every artefact, APIs, course map, worksheet, mutation summary)")
    parser.add_argument("ids", nargs="*", metavar="ID", help="assignments (default: all)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print only the errors and a last line (no tables, no warnings)")
    parser.set_defaults(handler=lambda args, course: run_doctor(course, args.ids, args.root,
                                                                quiet=args.quiet))

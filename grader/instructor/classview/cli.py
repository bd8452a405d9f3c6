"""`python -m grader class FOLDER --out report/` (or `--gradebook DB`): the class report.

Exit status: 0 when the report was written (skipped files are listed in it and on stderr);
2 when there is nothing to read (no folder and no gradebook, or a missing one).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.instructor.classview.collect import (
    ClassData,
    Progress,
    read_class,
    read_gradebook,
    stderr_progress,
)
from grader.instructor.classview.render import write_report
from grader.instructor.classview.similarity import MAX_PAIRS, similar_pairs
from grader.instructor.classview.stats import assignment_stats
from grader.manifest import Course


def build_report(data: ClassData, out: Path, root: Path, workers: int = 2,
                 max_pairs: int = MAX_PAIRS, progress: Progress | None = stderr_progress
                 ) -> list[Path]:
    """Statistics, similarity and the written report of a class as read; the pages written."""
    course = data.course
    ids = [a for a in course.ids if any(k[1] == a for k in data.submissions)]
    by_assignment = {a: data.of_assignment(a) for a in ids}
    stats = {a: assignment_stats(a, subs) for a, subs in by_assignment.items()}
    pairs = similar_pairs([course.get(a) for a in ids], by_assignment, root=root,
                          max_pairs=max_pairs, workers=workers, progress=progress)
    if progress:
        progress("writing the report")
    return write_report(out, data, stats, pairs)


def register(sub: argparse._SubParsersAction) -> None:
    """`python -m grader class`."""
    parser = sub.add_parser(
        "class", help="the class report: score spread, failing tests, similar submissions",
        description="Read every student's results.json under FOLDER/<student>/ (and the "
                    "submitted modules beside it) or an nbgrader gradebook, and write a static "
                    "HTML report with CSV tables.")
    parser.add_argument("folder", type=Path, nargs="?", metavar="FOLDER",
                        help="the class: FOLDER/<student>/**/results.json")
    parser.add_argument("--gradebook", type=Path, default=None, metavar="DB",
                        help="read scores from this gradebook (`gradebook import`) instead")
    parser.add_argument("--out", type=Path, default=Path("report"),
                        help="the report's folder (default: report/)")
    parser.add_argument("--workers", type=int, default=2,
                        help="processes that fingerprint code (default: 2)")
    parser.add_argument("--pairs", type=int, default=MAX_PAIRS,
                        help=f"pairs compared in full per assignment (default: {MAX_PAIRS})")
    parser.set_defaults(handler=_class)


def _class(args: argparse.Namespace, course: Course) -> int:
    if (args.folder is None) == (args.gradebook is None):
        print("error: give a class FOLDER or --gradebook DB (one of them)", file=sys.stderr)
        return 2
    source = args.folder if args.folder is not None else args.gradebook
    if not (source.is_dir() if args.folder is not None else source.is_file()):
        print(f"error: {source}: not found", file=sys.stderr)
        return 2
    if args.folder is not None:
        data = read_class(args.folder, course)
    else:
        data = read_gradebook(args.gradebook, course)
    for path, why in data.skipped:
        print(f"skipped {path}: {why}", file=sys.stderr)
    pages = build_report(data, args.out, args.root, args.workers, args.pairs)
    print(f"{len(data.students)} students, {len(data.submissions)} submissions, "
          f"{len(data.skipped)} skipped; report: {pages[0]}")
    return 0

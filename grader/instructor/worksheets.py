"""Worksheets, the instructor's side: check them and regenerate the student notebooks.

    python -m grader worksheets release [ID ...]   # regenerate assignments/<id>/worksheet.ipynb
    python -m grader worksheets check [ID ...]     # selfcheck of the worksheets alone

Both need the source notebooks (`solutions/<id>/worksheet.ipynb`), so neither ships in a
student release; grading a worksheet is `grader/worksheets/grading.py`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from grader.manifest import Assignment, Course
from grader.worksheets.grading import (
    HIDDEN_MARKERS,
    SOLUTION_MARKERS,
    GradeCell,
    grade_cells,
    release_path,
    source_path,
    to_test_results,
    with_worksheets,
)
from grader.worksheets.nbgrade import (
    Submission,
    WorksheetError,
    autograde,
    cell_source,
    nbgrader_meta,
    read_notebook,
)

# --- the worksheet checks of selfcheck ------------------------------------------------------


def check_worksheets(
    assignments: Sequence[Assignment],
    root: Path,
    suites: Path | None = None,
    echo: Callable[[str], None] = print,
) -> dict[str, list[str]]:
    """Breaches per assignment of the worksheet rules (selfcheck's "worksheet" check).

    - the source notebook exists, its grade cells carry the manifest's `worksheet_points`, with
      at least one visible and one hidden test, and 4–8 answer cells;
    - the committed student notebook is what `generate_assignment` makes of the source now;
    - the student notebook holds no solution and no hidden test (markers or their lines);
    - the source scores full marks; the student notebook scores zero, "not implemented".
    """
    breaches: dict[str, list[str]] = {a.id: [] for a in assignments}
    sources: dict[str, Path] = {}
    cells: dict[str, tuple[GradeCell, ...]] = {}
    for a in assignments:
        source = source_path(root, a.id, suites)
        if a.worksheet_points == 0:
            if source.is_file():
                breaches[a.id].append(f"{_rel(source, root)} exists but the manifest gives it "
                                      "no worksheet_points")
            continue
        try:
            cells[a.id] = grade_cells(source)
            breaches[a.id] += static_breaches(a, source, release_path(root, a.id), root)
        except WorksheetError as exc:
            breaches[a.id].append(str(exc))
            continue
        sources[a.id] = source
    if not sources:
        return breaches
    submissions = [Submission(a, "source", sources[a]) for a in sources]
    submissions += [Submission(a, "release", release_path(root, a)) for a in sources]
    echo(f"worksheets: autograding {len(submissions)} notebook(s) with nbgrader")
    with tempfile.TemporaryDirectory(prefix="mlsys-release-check-") as fresh:
        done = autograde(submissions, sources, echo=echo, release_dir=Path(fresh))
        for a in sources:
            committed = release_path(root, a)
            generated = done.releases.get(a)
            if generated is None:
                breaches[a].append("nbgrader generated no student notebook from the source")
            elif committed.is_file() and read_notebook(generated) != read_notebook(committed):
                breaches[a].append(f"{_rel(committed, root)} is out of date with its source; "
                                   f"run `python -m grader worksheets release {a}`")
    for a in sources:
        for t in to_test_results(a, "source", cells[a], done):
            if not t.passed:
                breaches[a].append(f"source notebook fails {t.name}: {t.feedback}")
        for t in to_test_results(a, "release", cells[a], done):
            if t.passed:
                breaches[a].append(f"student notebook passes {t.name}: it grades nothing")
            elif not t.not_implemented:
                breaches[a].append(f"student notebook fails {t.name} for another reason than "
                                   f"'not implemented': {t.feedback}")
    echo(f"worksheets: checked in {done.wall_s:.1f} s")
    return breaches


def static_breaches(assignment: Assignment, source: Path, release: Path, root: Path) -> list[str]:
    """The checks that need no nbgrader run: points, shape, and nothing leaked to students."""
    problems = []
    cells = grade_cells(source)
    total = sum(c.points for c in cells)
    if total != assignment.worksheet_points:
        problems.append(f"{_rel(source, root)}: test cells carry {total} points, the manifest "
                        f"says worksheet_points = {assignment.worksheet_points}")
    if not any(c.hidden for c in cells) or all(c.hidden for c in cells):
        problems.append(f"{_rel(source, root)}: needs both visible and hidden test cells")
    answers = [c for c in read_notebook(source)["cells"] if nbgrader_meta(c).get("solution")]
    if not 4 <= len(answers) <= 8:
        problems.append(f"{_rel(source, root)}: {len(answers)} answer cells; a worksheet asks "
                        "4 to 8 questions")
    if not release.is_file():
        problems.append(f"{_rel(release, root)} is missing; run "
                        f"`python -m grader worksheets release {assignment.id}`")
        return problems
    problems += [f"{_rel(release, root)}: {leak}" for leak in leaks(source, release)]
    return problems


def leaks(source: Path, release: Path) -> list[str]:
    """Solution or hidden-test text of `source` found in `release`.

    A line counts when it appears inside a solution or hidden-test region of the source and
    nowhere outside such regions (so shared lines such as `return x` do not count).
    """
    secret: set[str] = set()
    public: set[str] = set()
    for cell in read_notebook(source)["cells"]:
        inside = False
        for line in cell_source(cell).splitlines():
            stripped = line.strip()
            if stripped in (SOLUTION_MARKERS[0], HIDDEN_MARKERS[0]):
                inside = True
            elif stripped in (SOLUTION_MARKERS[1], HIDDEN_MARKERS[1]):
                inside = False
            elif stripped and not stripped.startswith("#"):
                (secret if inside else public).add(stripped)
    secret -= public
    text = "\n".join(cell_source(c) for c in read_notebook(release)["cells"])
    found = [f"contains the marker {m!r}" for m in (SOLUTION_MARKERS[0], HIDDEN_MARKERS[0])
             if m in text]
    lines = {line.strip() for line in text.splitlines()}
    found += [f"contains a solution or hidden-test line: {line!r}"
              for line in sorted(secret & lines)]
    return found


def release(assignments: Sequence[Assignment], root: Path,
            echo: Callable[[str], None] = print) -> list[Path]:
    """Regenerate `assignments/<id>/worksheet.ipynb` from the sources; returns those written."""
    sources = {a.id: source_path(root, a.id) for a in assignments
               if source_path(root, a.id).is_file()}
    for a in sources.values():
        grade_cells(a)  # fail early, naming the file, on a malformed source
    if not sources:
        return []
    with tempfile.TemporaryDirectory(prefix="mlsys-release-") as fresh:
        done = autograde([], sources, echo=echo, release_dir=Path(fresh))
        written = []
        for assignment_id, path in sorted(done.releases.items()):
            target = release_path(root, assignment_id)
            shutil.copy(path, target)
            written.append(target)
    return written


def _rel(path: Path, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path(root).resolve()))
    except ValueError:
        return str(path)


# --- command line -----------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> None:
    """`python -m grader worksheets release|check [ID ...]`."""
    parser = sub.add_parser("worksheets", help="release or check the nbgrader worksheets")
    parser.add_argument("action", choices=("release", "check"),
                        help="release: regenerate assignments/<id>/worksheet.ipynb from "
                        "solutions/<id>/worksheet.ipynb; check: the worksheet part of selfcheck")
    parser.add_argument("ids", nargs="*", metavar="ID", help="assignments (default: all)")
    parser.set_defaults(handler=_command)


def _command(args: argparse.Namespace, course: Course) -> int:
    from grader.report.render import format_table

    chosen = with_worksheets(course.select(args.ids))
    if not chosen:
        print("no selected assignment has worksheet_points in the manifest")
        return 0
    try:
        if args.action == "release":
            for path in release(chosen, args.root):
                print(f"wrote {_rel(path, args.root)}")
            return 0
        breaches = check_worksheets(chosen, args.root, echo=print)
    except WorksheetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    rows = [[a, "✗" if b else "✓", len(b)] for a, b in breaches.items()]
    print(format_table(["assignment", "worksheet", "breaches"], rows))
    for a, found in breaches.items():
        for b in found:
            print(f"  - {a}: {b}")
    return 1 if any(breaches.values()) else 0

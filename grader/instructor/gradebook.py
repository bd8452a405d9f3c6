"""`python -m grader gradebook`: grader results into an nbgrader gradebook, grades out as a table.

    python -m grader gradebook import grading/results.json --student alice [--db gradebook.db]
    python -m grader gradebook export --format csv [--db gradebook.db] [--out grades.csv]

The gradebook is nbgrader's own (SQLite by default), so `nbgrader formgrader`, `nbgrader
export` and nbgrader's Python API read it too. Its layout, created from the course manifest:

- one nbgrader assignment per course assignment, named by its id;
- in it, a notebook `suites` with two grade cells, `public` (public_points) and `hidden`
  (points − public_points), and, when the manifest gives worksheet points, a notebook
  `worksheet` with one grade cell `worksheet` (worksheet_points);
- per (assignment, student) one submission whose grades are the points earned in the run.

Importing writes only the parts the run graded (a run without hidden suites leaves `hidden`
as it was); importing the same or a newer run again overwrites, never duplicates. A results
file written for another course version (`extra_data.course.version`) is refused.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from grader.manifest import Course
from grader.report.gradescope import ResultsJsonError, load_results_json

DEFAULT_DB = Path("gradebook.db")
# (notebook, grade cell) of each part of an assignment's grade.
SUITES = "suites"
WORKSHEET = "worksheet"


class GradebookError(ValueError):
    """A results file that cannot be imported (unreadable, malformed, another course)."""


@dataclass(frozen=True)
class PartScore:
    """Points earned in one grade cell of one assignment."""

    assignment: str
    notebook: str
    cell: str
    score: float


def cells_of(course: Course) -> dict[str, list[tuple[str, str, int]]]:
    """assignment id -> [(notebook, grade cell, max score)], from the manifest."""
    layout = {}
    for a in course.assignments:
        cells = [(SUITES, "public", a.public_points), (SUITES, "hidden", a.hidden_points)]
        if a.worksheet_points:
            cells.append((WORKSHEET, WORKSHEET, a.worksheet_points))
        layout[a.id] = [c for c in cells if c[2] > 0]
    return layout


def read_results(path: Path, course: Course) -> list[PartScore]:
    """The scores of a results.json, per grade cell; `GradebookError` when it cannot be used."""
    try:
        document = load_results_json(Path(path))
    except ResultsJsonError as exc:
        raise GradebookError(f"{path}: {exc}") from exc
    meta = document["extra_data"]["course"]
    if meta["version"] != course.version or meta["name"] != course.name:
        written = f"{meta['name'] or '?'} {meta['version'] or '(no version)'}"
        raise GradebookError(
            f"{path} was graded for course {written}, but this checkout's manifest is "
            f"{course.name} {course.version}; grade the submission again with this checkout, "
            "or import it from a checkout of the version it was graded with")
    layout = cells_of(course)
    totals: dict[tuple[str, str, str], float] = {}
    for test in document["tests"]:
        tags = test.get("tags", [])
        extra = test.get("extra_data", {})
        if len(tags) < 2 or tags[0] not in layout:
            raise GradebookError(f"{path}: test {test['name']!r} names no assignment of "
                                 f"{course.name} {course.version} in its tags")
        if extra.get("part", "suite") == "worksheet":
            key = (tags[0], WORKSHEET, WORKSHEET)
        else:
            key = (tags[0], SUITES, "public" if tags[1] == "public" else "hidden")
        totals[key] = totals.get(key, 0.0) + float(test["score"])
    known = {(a, nb, cell) for a, cells in layout.items() for nb, cell, _ in cells}
    for key in totals:
        if key not in known:
            raise GradebookError(f"{path}: scores for {'/'.join(key)}, which the manifest "
                                 "gives no points")
    return [PartScore(*key, score) for key, score in sorted(totals.items())]


@contextmanager
def _venv_on_path() -> Iterator[None]:
    """nbgrader shells out to `alembic` when it creates a gradebook; `make test` and plain
    `.venv/bin/python` do not put the venv's bin directory on PATH, so we do, for the call."""
    old = os.environ.get("PATH", "")
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), old])
    try:
        yield
    finally:
        os.environ["PATH"] = old


@contextmanager
def open_gradebook(db: Path, course: Course):
    """nbgrader's `Gradebook` on the SQLite file `db` (created when missing)."""
    import logging
    import warnings

    from nbgrader.api import Gradebook
    from sqlalchemy.exc import SAWarning

    logging.getLogger("tornado.application").setLevel(logging.CRITICAL)
    Path(db).parent.mkdir(parents=True, exist_ok=True)
    # nbgrader 0.9 builds submissions in a way SQLAlchemy 2 warns about; the rows are right.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)
        with _venv_on_path():
            gradebook = Gradebook(f"sqlite:///{Path(db).resolve()}", course_id=course.name)
        try:
            yield gradebook
        finally:
            gradebook.close()


def import_results(path: Path, student: str, db: Path, course: Course) -> list[PartScore]:
    """Record one student's scores from `path` into the gradebook `db`; returns them."""
    if not student.strip() or student != student.strip():
        raise GradebookError(f"student id {student!r}: give a non-empty id without spaces "
                             "around it")
    scores = read_results(path, course)
    layout = cells_of(course)
    with open_gradebook(db, course) as gb:
        for assignment_id, cells in layout.items():  # the whole course, from the manifest
            gb.update_or_create_assignment(assignment_id)
            for notebook, cell, max_score in cells:
                gb.update_or_create_notebook(notebook, assignment_id)
                gb.update_or_create_grade_cell(cell, notebook, assignment_id,
                                               max_score=max_score, cell_type="code")
        gb.update_or_create_student(student)
        for assignment_id in sorted({s.assignment for s in scores}):
            gb.update_or_create_submission(assignment_id, student)
        for s in scores:
            grade = _grade_row(gb, s, student)
            grade.auto_score = s.score
            grade.needs_manual_grade = False
        gb.db.commit()
    return scores


def _grade_row(gb, score: PartScore, student: str):
    """The Grade row of a cell, created when the cell was added after the submission."""
    from nbgrader.api import Grade, MissingEntry, SubmittedNotebook

    try:
        return gb.find_grade(score.cell, score.notebook, score.assignment, student)
    except MissingEntry:
        pass
    submission = gb.find_submission(score.assignment, student)
    try:
        notebook = gb.find_submission_notebook(score.notebook, score.assignment, student)
    except MissingEntry:
        notebook = SubmittedNotebook(
            notebook=gb.find_notebook(score.notebook, score.assignment), assignment=submission)
        gb.db.add(notebook)
    cell = gb.find_grade_cell(score.cell, score.notebook, score.assignment)
    grade = Grade(cell_id=cell.id, notebook=notebook)
    gb.db.add(grade)
    gb.db.flush()
    return grade


def grade_table(db: Path, course: Course) -> tuple[list[str], list[list[object]]]:
    """Headers and rows of the course grade table: one row per student, a column per
    assignment (blank when never imported), then the total and the course maximum."""
    layout = cells_of(course)
    maxima = {a: sum(m for _, _, m in cells) for a, cells in layout.items()}
    from nbgrader.api import MissingEntry

    headers = ["student", *course.ids, "total", "max_score"]
    rows: list[list[object]] = []
    with open_gradebook(db, course) as gb:
        for student in sorted(gb.students, key=lambda s: s.id):
            row: list[object] = [student.id]
            total = 0.0
            for assignment_id in course.ids:
                try:
                    submission = gb.find_submission(assignment_id, student.id)
                except MissingEntry:  # never imported
                    row.append("")
                    continue
                score = sum(g.auto_score or 0.0 for nb in submission.notebooks
                            for g in nb.grades)
                total += score
                row.append(_number(score))
            rows.append(row + [_number(total), _number(sum(maxima.values()))])
    return headers, rows


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else round(value, 2)


# --- command line -----------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> None:
    """`python -m grader gradebook import|export`."""
    parser = sub.add_parser("gradebook", help="record grades in an nbgrader gradebook; export")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    imp = actions.add_parser("import", help="record one student's results.json")
    imp.add_argument("results", type=Path, metavar="RESULTS.json")
    imp.add_argument("--student", required=True, help="the student's id in the gradebook")
    imp.add_argument("--db", type=Path, default=DEFAULT_DB,
                     help="the gradebook's SQLite file (default: ./gradebook.db)")
    imp.set_defaults(handler=_import)
    exp = actions.add_parser("export", help="write the course grade table")
    exp.add_argument("--format", choices=("csv", "table"), default="csv",
                     help="csv (default) or a plain-text table")
    exp.add_argument("--db", type=Path, default=DEFAULT_DB,
                     help="the gradebook's SQLite file (default: ./gradebook.db)")
    exp.add_argument("--out", type=Path, default=None, help="file to write (default: stdout)")
    exp.set_defaults(handler=_export)


def _import(args: argparse.Namespace, course: Course) -> int:
    try:
        scores = import_results(args.results, args.student, args.db, course)
    except GradebookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    from grader.report.render import format_table

    rows = [[s.assignment, f"{s.notebook}/{s.cell}", _number(s.score)] for s in scores]
    print(f"recorded {len(scores)} grade(s) for {args.student} in {args.db}")
    print(format_table(["assignment", "part", "score"], rows))
    return 0


def _export(args: argparse.Namespace, course: Course) -> int:
    if not args.db.is_file():
        print(f"error: {args.db}: no gradebook there (import results first)", file=sys.stderr)
        return 1
    headers, rows = grade_table(args.db, course)
    if args.format == "table":
        from grader.report.render import format_table

        text = format_table(headers, rows) + "\n"
    else:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(headers)
        writer.writerows(rows)
        text = buffer.getvalue()
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {len(rows)} student row(s) to {args.out}", file=sys.stderr)
    return 0

"""Worksheets: the "calculate before you code" notebooks, released and autograded with nbgrader.

Each assignment may have a worksheet: the source notebook, in nbgrader's format with solutions
and hidden tests, is `solutions/<id>/worksheet.ipynb`; the student version, generated from it
by `nbgrader generate_assignment`, is `assignments/<id>/worksheet.ipynb`. Grading runs
`nbgrader autograde` in a temporary course directory and turns every grade cell into a
`TestResult` of part "worksheet": visible test cells are "public", cells holding hidden tests
are "hidden" and report their name and points only.

Running nbgrader itself, and the traps that come with it, is `grader/nbgrade.py`.

    python -m grader worksheets release [ID ...]   # regenerate assignments/<id>/worksheet.ipynb
    python -m grader worksheets check [ID ...]     # selfcheck of the worksheets alone
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from grader.manifest import Assignment, Course
from grader.nbgrade import (  # noqa: F401  (re-exported: the worksheet API in one place)
    NOTEBOOK,
    Autograded,
    CellGrade,
    Submission,
    WorksheetError,
    autograde,
    cell_source,
    nbgrader_meta,
    read_notebook,
    worker_env,
    write_kernelspec,
)
from grader.results import NOT_GRADED_HERE, RunResult, TestResult

PART = "worksheet"
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
HIDDEN_MARKERS = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
REASON_CHARS = 160


@dataclass(frozen=True)
class GradeCell:
    """One autograded test cell of a source notebook."""

    grade_id: str
    points: int
    hidden: bool


# --- source notebooks -------------------------------------------------------------------------


def source_path(root: Path, assignment_id: str, suites: Path | None = None) -> Path:
    """The source notebook: `<suites>/<id>/worksheet.ipynb` if present, else in solutions/."""
    if suites is not None and (suites / assignment_id / NOTEBOOK).is_file():
        return suites / assignment_id / NOTEBOOK
    return root / "solutions" / assignment_id / NOTEBOOK


def release_path(root: Path, assignment_id: str) -> Path:
    return root / "assignments" / assignment_id / NOTEBOOK


def grade_cells(source: Path) -> tuple[GradeCell, ...]:
    """The autograded test cells of a source notebook, in notebook order.

    Points must be whole numbers (reports and the manifest count integer points).
    """
    cells = []
    for cell in read_notebook(source)["cells"]:
        meta = nbgrader_meta(cell)
        if not meta.get("grade") or meta.get("solution") or cell.get("cell_type") != "code":
            continue
        points = meta.get("points", 0)
        if not isinstance(points, (int, float)) or points != int(points) or points <= 0:
            raise WorksheetError(f"{source}: cell {meta.get('grade_id')!r} has points "
                                 f"{points!r}; use a positive whole number")
        hidden = HIDDEN_MARKERS[0] in cell_source(cell)
        cells.append(GradeCell(str(meta.get("grade_id")), int(points), hidden))
    return tuple(cells)


def with_worksheets(assignments: Sequence[Assignment]) -> list[Assignment]:
    """The assignments that carry worksheet points."""
    return [a for a in assignments if a.worksheet_points > 0]


# --- results ----------------------------------------------------------------------------------


def to_test_results(assignment_id: str, student: str, cells: Sequence[GradeCell],
                    autograded: Autograded) -> tuple[TestResult, ...]:
    """One `TestResult` (part "worksheet") per grade cell of the source, in notebook order.

    A test passes when nbgrader gave its cell full marks. Hidden cells report their name and
    points, and as reason only the error type (their message could quote hidden values);
    visible cells report the error line. A cell whose answer cell still raises
    NotImplementedError is "not implemented".
    """
    problem = autograded.problems.get((assignment_id, student), "")
    by_id = {g.grade_id: g for g in autograded.grades
             if g.assignment == assignment_id and g.student == student}
    results = []
    for cell in cells:
        grade = by_id.get(cell.grade_id)
        reason, passed, not_implemented = "", False, False
        if grade is None:
            reason = problem or "nbgrader gave this cell no grade"
        else:
            passed = grade.max_score > 0 and grade.score >= grade.max_score
            not_implemented = grade.not_implemented and not passed
            reason = "" if passed else _reason(cell, grade)
        results.append(TestResult(
            nodeid=f"{assignment_id}/{NOTEBOOK}::{cell.grade_id}",
            name=f"{PART}::{cell.grade_id}",
            assignment=assignment_id,
            visibility="hidden" if cell.hidden else "public",
            points=cell.points,
            outcome="passed" if passed else "failed",
            reason=reason,
            not_implemented=not_implemented,
            part=PART,
        ))
    return tuple(results)


def not_graded(assignment_id: str, cells: Sequence[GradeCell] | int,
               why: str) -> tuple[TestResult, ...]:
    """Results for a worksheet that cannot be graded here (no source notebook): excluded from
    the maximum like GPU-only tests. `cells` may be just the points when the cells are unknown."""
    if isinstance(cells, int):
        cells = (GradeCell("worksheet", cells, True),)
    return tuple(
        TestResult(nodeid=f"{assignment_id}/{NOTEBOOK}::{c.grade_id}",
                   name=f"{PART}::{c.grade_id}", assignment=assignment_id,
                   visibility="hidden" if c.hidden else "public", points=c.points,
                   outcome="skipped", reason=f"{NOT_GRADED_HERE}: {why}",
                   not_graded_here=True, part=PART)
        for c in cells
    )


def _reason(cell: GradeCell, grade: CellGrade) -> str:
    if grade.answer_error:
        return _clip(f"the answer cell above failed: {grade.answer_error}")
    if not grade.error:
        return "the cell scored zero"
    if cell.hidden:
        kind = grade.error.split(":", 1)[0]
        return f"a hidden test failed ({kind})"
    return _clip(grade.error)


def _clip(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def submitted_notebook(impl: str, root: Path, assignment_id: str) -> Path | None:
    """The student notebook that `--impl` grades (None: nothing to grade).

    `assignments`: the checkout's own; `solutions`: the source (full marks); a directory laid
    out like assignments/: `<dir>/<id>/worksheet.ipynb`; `mutant:<id>/<name>`: mutants patch
    code, not worksheets, so the source notebook is graded.
    """
    if impl == "assignments":
        return release_path(root, assignment_id)
    if impl == "solutions" or impl.startswith("mutant:"):
        return source_path(root, assignment_id)
    return Path(impl) / assignment_id / NOTEBOOK


def grade_worksheets(
    course: Course,
    ids: Sequence[str],
    impl: str,
    root: Path,
    suites: Path | None = None,
    echo: Callable[[str], None] = print,
    student: str = "student",
) -> tuple[TestResult, ...]:
    """Autograde the worksheets of the selected assignments for `python -m grader grade`."""
    results: list[TestResult] = []
    sources: dict[str, Path] = {}
    cells: dict[str, tuple[GradeCell, ...]] = {}
    for a in with_worksheets(course.select(list(ids))):
        source = source_path(root, a.id, suites)
        if not source.is_file():
            results += not_graded(a.id, a.worksheet_points,
                                  "the worksheet's source notebook is not in this checkout")
            continue
        cells[a.id] = grade_cells(source)
        sources[a.id] = source
    if sources:
        notebooks = {a: submitted_notebook(impl, root, a) for a in sources}
        if impl == "solutions" or impl.startswith("mutant:"):
            notebooks = dict(sources)
        echo(f"grading {len(sources)} worksheet(s) with nbgrader")
        done = autograde([Submission(a, student, notebooks[a]) for a in sources], sources,
                         echo=lambda line: echo(f"  {line}"))
        for a in sources:
            results += to_test_results(a, student, cells[a], done)
    order = {a.id: i for i, a in enumerate(course.assignments)}
    return tuple(sorted(results, key=lambda t: order.get(t.assignment, len(order))))


def with_worksheet_results(run: RunResult, course: Course, ids: Sequence[str], impl: str,
                           root: Path, suites: Path | None = None,
                           echo: Callable[[str], None] = print) -> RunResult:
    """`run` with the worksheet results of the selected assignments added (for `grade`)."""
    try:
        extra = grade_worksheets(course, ids, impl, root, suites, echo)
    except WorksheetError as exc:  # a malformed source: the instructor's problem, said so
        return replace(run, collection_errors=run.collection_errors + (f"worksheets: {exc}",))
    return replace(run, tests=run.tests + extra)


# --- selfcheck and release --------------------------------------------------------------------


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
    from grader.reports import format_table

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

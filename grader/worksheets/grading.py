"""Grading the worksheets: the "calculate before you code" notebooks, autograded with nbgrader.

Each assignment may have a worksheet: the source notebook, in nbgrader's format with solutions
and hidden tests, is `solutions/<id>/worksheet.ipynb`; the student version, generated from it
by `nbgrader generate_assignment`, is `assignments/<id>/worksheet.ipynb`. Grading runs
`nbgrader autograde` in a temporary course directory and turns every grade cell into a
`TestResult` of part "worksheet": visible test cells are "public", cells holding hidden tests
are "hidden" and report their name and points only.

Running nbgrader itself, and the traps that come with it, is `grader/worksheets/nbgrade.py`;
checking and regenerating the worksheets (`python -m grader worksheets release|check`) is
instructors' work, in `grader/instructor/worksheets.py`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grader.manifest import Assignment, Course
from grader.report.results import NOT_GRADED_HERE, RunResult, TestResult, clip_reason
from grader.worksheets.nbgrade import (
    NOTEBOOK,
    Autograded,
    CellGrade,
    Submission,
    WorksheetError,
    autograde,
    cell_source,
    nbgrader_meta,
    read_notebook,
)

if TYPE_CHECKING:  # harness pulls in torch; the pr-comment job has none
    from harness.impl import ImplSpec

PART = "worksheet"
# --impl kinds whose worksheet is the source notebook: mutants patch code, not worksheets.
SOURCE_GRADED = ("solutions", "mutant")
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
HIDDEN_MARKERS = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")


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
        return clip_reason(f"the answer cell above failed: {grade.answer_error}")
    if not grade.error:
        return "the cell scored zero"
    if cell.hidden:
        kind = grade.error.split(":", 1)[0]
        return f"a hidden test failed ({kind})"
    return clip_reason(grade.error)


def submitted_notebook(impl: ImplSpec, root: Path, assignment_id: str) -> Path | None:
    """The student notebook that `--impl` grades (None: nothing to grade).

    `assignments`: the checkout's own; `solutions`: the source (full marks); a directory laid
    out like assignments/: `<dir>/<id>/worksheet.ipynb`; `mutant:<id>/<name>`: mutants patch
    code, not worksheets, so the source notebook is graded.
    """
    if impl.kind == "assignments":
        return release_path(root, assignment_id)
    if impl.kind in SOURCE_GRADED:
        return source_path(root, assignment_id)
    return Path(impl.root) / assignment_id / NOTEBOOK


def grade_worksheets(
    course: Course,
    ids: Sequence[str],
    impl: ImplSpec,
    root: Path,
    suites: Path | None = None,
    echo: Callable[[str], None] = print,
    student: str = "student",
    cache: Path | None = None,
) -> tuple[TestResult, ...]:
    """Autograde the worksheets of the selected assignments for `python -m grader grade`.

    `cache`: a folder where each assignment's rows are kept under the hash of everything they
    depend on (`cache_key`: the submitted and source notebooks, the student, this grading code
    and nbgrader's version); a worksheet whose key is there is not graded again. Only for local
    runs: a submission could plant a folder of forged rows, so the trusted grading passes none.
    """
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
    notebooks = {a: submitted_notebook(impl, root, a) for a in sources}
    if impl.kind in SOURCE_GRADED:
        notebooks = dict(sources)
    keys = {a: cache_key(a, student, sources[a], notebooks[a]) for a in sources} \
        if cache is not None else {}
    for a in list(sources):
        kept = _cached(cache, keys.get(a))
        if kept is not None:
            results += kept
            del sources[a]
    if sources:
        echo(f"grading {len(sources)} worksheet(s) with nbgrader")
        done = autograde([Submission(a, student, notebooks[a]) for a in sources], sources,
                         echo=lambda line: echo(f"  {line}"))
        for a in sources:
            rows = to_test_results(a, student, cells[a], done)
            results += rows
            _keep(cache, keys.get(a), rows)
    order = {a.id: i for i, a in enumerate(course.assignments)}
    return tuple(sorted(results, key=lambda t: order.get(t.assignment, len(order))))


# --- the local cache ----------------------------------------------------------------------------

# What a worksheet's rows depend on besides the notebooks: this grading code.
_GRADING_CODE = ("grading.py", "nbgrade.py", "nbworker.py")


def cache_key(assignment_id: str, student: str, source: Path, notebook: Path | None
              ) -> str | None:
    """The hash naming an assignment's worksheet rows in the cache; None when the submitted
    notebook is missing (graded every time: its rows say why)."""
    if notebook is None or not notebook.is_file():
        return None
    from importlib.metadata import PackageNotFoundError, version

    digest = hashlib.sha256(f"{assignment_id}\0{student}\0".encode())
    try:
        digest.update(version("nbgrader").encode())
    except PackageNotFoundError:
        pass
    here = Path(__file__).resolve().parent
    for path in (*(here / name for name in _GRADING_CODE), source, notebook):
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _cached(cache: Path | None, key: str | None) -> tuple[TestResult, ...] | None:
    """The rows kept under `key`, or None (none kept, or unreadable: graded again)."""
    if cache is None or key is None:
        return None
    try:
        data = json.loads((cache / f"{key}.json").read_text(encoding="utf-8"))
        return RunResult.from_json(data, "worksheet cache").tests
    except (OSError, ValueError):
        return None


def _keep(cache: Path | None, key: str | None, rows: Sequence[TestResult]) -> None:
    """Keep `rows` under `key` (written whole, then renamed: a reader never sees half)."""
    if cache is None or key is None:
        return
    try:
        cache.mkdir(parents=True, exist_ok=True)
        data = {"impl": "worksheet", "tests": [asdict(t) for t in rows],
                "collection_errors": [], "exitstatus": 0}
        partial = cache / f"{key}.json.tmp"
        partial.write_text(json.dumps(data), encoding="utf-8")
        partial.replace(cache / f"{key}.json")
    except OSError:
        pass  # a cache that cannot be written only costs the next run the grading

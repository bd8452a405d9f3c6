"""Worksheets: the "calculate before you code" notebooks, released and autograded with nbgrader.

Each assignment may have a worksheet: the source notebook, in nbgrader's format with solutions
and hidden tests, is `solutions/<id>/worksheet.ipynb`; the student version, generated from it
by `nbgrader generate_assignment`, is `assignments/<id>/worksheet.ipynb`. Grading runs
`nbgrader autograde` in a temporary course directory and turns every grade cell into a
`TestResult` of part "worksheet": visible test cells are "public", cells holding hidden tests
are "hidden" and report their name and points only.

nbgrader traps handled here (each has a test in grader/tests/test_worksheets.py):
- any stderr output zeroes a cell: the kernel runs with warnings silenced (`KERNEL_ENV`);
- the gradebook shells out to `alembic`: the venv's bin directory goes first on PATH;
- the `python3` kernelspec may start whatever `python` is on PATH: a kernelspec written into
  the course directory runs this interpreter (`sys.executable`);
- cells time out (30 s by default): the timeout is explicit, a timed-out cell scores zero and
  the rest of the notebook is still graded; the whole nbgrader run has a wall-clock limit;
- students delete or edit cells: locked and test cells are restored from the gradebook
  (`OverwriteCells.add_missing_cells`), so a deleted or emptied test still runs.

Speed: one nbgrader process per course directory generates every assignment and autogrades
every submission in it; submissions are split over at most `workers` (2) such processes.

    python -m grader worksheets release [ID ...]   # regenerate assignments/<id>/worksheet.ipynb
    python -m grader worksheets check [ID ...]     # selfcheck of the worksheets alone
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from grader.manifest import Assignment, Course
from grader.results import NOT_GRADED_HERE, RunResult, TestResult

NOTEBOOK = "worksheet.ipynb"
PART = "worksheet"
CELL_TIMEOUT_S = 30
RUN_TIMEOUT_S = 600.0
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
HIDDEN_MARKERS = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
# The kernel's environment: no warning may reach stderr (nbgrader scores such a cell zero).
KERNEL_ENV = {
    "PYTHONWARNINGS": "ignore",
    "TORCH_CPP_LOG_LEVEL": "ERROR",
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    "JUPYTER_PLATFORM_DIRS": "1",
    "MPLBACKEND": "Agg",
    "OMP_NUM_THREADS": "1",
}
REASON_CHARS = 160


class WorksheetError(RuntimeError):
    """A worksheet source is malformed, or nbgrader could not be run at all."""


@dataclass(frozen=True)
class GradeCell:
    """One autograded test cell of a source notebook."""

    grade_id: str
    points: int
    hidden: bool


@dataclass(frozen=True)
class Submission:
    """One notebook to autograde: `notebook` None when the student submitted none."""

    assignment: str
    student: str
    notebook: Path | None


@dataclass(frozen=True)
class CellGrade:
    """What nbgrader gave one grade cell of one submission."""

    assignment: str
    student: str
    grade_id: str
    score: float
    max_score: float
    error: str = ""  # "Type: message" of the cell's own error, or its stderr
    answer_error: str = ""  # the same for the answer (solution) cell just above it
    not_implemented: bool = False


@dataclass(frozen=True)
class Autograded:
    """Everything one autograde call produced."""

    grades: tuple[CellGrade, ...]
    releases: Mapping[str, Path]  # freshly generated student notebooks, by assignment
    problems: Mapping[tuple[str, str], str]  # (assignment, student) -> why it was not graded
    wall_s: float = 0.0


# --- paths and source notebooks --------------------------------------------------------------


def source_path(root: Path, assignment_id: str, suites: Path | None = None) -> Path:
    """The source notebook: `<suites>/<id>/worksheet.ipynb` if present, else in solutions/."""
    if suites is not None and (suites / assignment_id / NOTEBOOK).is_file():
        return suites / assignment_id / NOTEBOOK
    return root / "solutions" / assignment_id / NOTEBOOK


def release_path(root: Path, assignment_id: str) -> Path:
    return root / "assignments" / assignment_id / NOTEBOOK


def read_notebook(path: Path) -> dict:
    """The notebook as JSON; `WorksheetError` naming the file when it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WorksheetError(f"{path}: not a readable notebook ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise WorksheetError(f"{path}: not a notebook (no 'cells' list)")
    return data


def cell_source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def nbgrader_meta(cell: dict) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


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


def with_worksheets(assignments: Sequence[Assignment], root: Path,
                    suites: Path | None = None) -> list[Assignment]:
    """The assignments that carry worksheet points."""
    return [a for a in assignments if a.worksheet_points > 0]


# --- running nbgrader -------------------------------------------------------------------------


def autograde(
    submissions: Sequence[Submission],
    sources: Mapping[str, Path],
    *,
    workers: int = 2,
    cell_timeout: int = CELL_TIMEOUT_S,
    timeout: float = RUN_TIMEOUT_S,
    echo: Callable[[str], None] | None = None,
    release_dir: Path | None = None,
) -> Autograded:
    """Generate every assignment in `sources` and autograde `submissions` with nbgrader.

    Assignments are split over at most `workers` course directories, each graded by one
    nbgrader process (`_worker`); a process that runs past `timeout` seconds is killed and its
    submissions are reported in `problems`. `releases` holds the student notebooks generated
    on the way (valid until the next call: they live in a temporary directory kept by the
    caller through `keep`—see `generate`).
    """
    started = time.perf_counter()
    ids = sorted(sources)
    groups = [ids[i::max(1, workers)] for i in range(max(1, min(workers, len(ids))))]
    tmp = Path(tempfile.mkdtemp(prefix="mlsys-worksheets-"))
    try:
        with ThreadPoolExecutor(max_workers=len(groups)) as pool:
            futures = [
                pool.submit(_grade_group, tmp / f"course{i}", {a: sources[a] for a in group},
                            [s for s in submissions if s.assignment in group],
                            cell_timeout, timeout, echo)
                for i, group in enumerate(groups) if group
            ]
            parts = [f.result() for f in futures]
        grades = tuple(g for part in parts for g in part.grades)
        problems = {k: v for part in parts for k, v in part.problems.items()}
        releases: dict[str, Path] = {}
        for part in parts:
            for assignment_id, path in part.releases.items() if release_dir else ():
                target = Path(release_dir) / assignment_id / NOTEBOOK
                target.parent.mkdir(parents=True, exist_ok=True)
                releases[assignment_id] = Path(shutil.copy(path, target))
        return Autograded(grades, releases, problems, time.perf_counter() - started)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _grade_group(course: Path, sources: Mapping[str, Path], submissions: Sequence[Submission],
                 cell_timeout: int, timeout: float,
                 echo: Callable[[str], None] | None) -> Autograded:
    problems: dict[tuple[str, str], str] = {}
    for assignment_id, source in sources.items():
        (course / "source" / assignment_id).mkdir(parents=True)
        shutil.copy(source, course / "source" / assignment_id / NOTEBOOK)
    for sub in submissions:
        if sub.notebook is None or not Path(sub.notebook).is_file():
            problems[(sub.assignment, sub.student)] = f"no {NOTEBOOK} was submitted"
            continue
        try:
            read_notebook(Path(sub.notebook))
        except WorksheetError as exc:
            problems[(sub.assignment, sub.student)] = str(exc).split(": ", 1)[-1]
            continue
        folder = course / "submitted" / sub.student / sub.assignment
        folder.mkdir(parents=True)
        shutil.copy(sub.notebook, folder / NOTEBOOK)
    jupyter = write_kernelspec(course / "jupyter")
    result_file = course / "result.json"
    command = [sys.executable, "-m", "grader.worksheets", "_worker", str(course),
               str(result_file), str(cell_timeout)]
    env = worker_env(jupyter)
    code, timed_out, tail = _run_worker(command, env, timeout, echo)
    try:
        data = json.loads(result_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        why = (f"nbgrader ran past {timeout:.0f} s and was killed" if timed_out
               else f"nbgrader failed (exit {code}): {_last_line(tail)}")
        if not submissions:  # a release: nobody to report it to but the caller
            raise WorksheetError(f"{why}") from None
        for sub in submissions:
            problems.setdefault((sub.assignment, sub.student), why)
        return Autograded((), {}, problems)
    grades = tuple(CellGrade(**g) for g in data["grades"])
    for key, why in data["problems"]:
        problems.setdefault(tuple(key), why)
    if timed_out:
        graded = {(g.assignment, g.student) for g in grades}
        for sub in submissions:
            if (sub.assignment, sub.student) not in graded:
                problems.setdefault((sub.assignment, sub.student),
                                    f"nbgrader ran past {timeout:.0f} s and was killed")
    releases = {a: course / "release" / a / NOTEBOOK for a in sources
                if (course / "release" / a / NOTEBOOK).is_file()}
    return Autograded(grades, releases, problems)


def write_kernelspec(jupyter_dir: Path) -> Path:
    """A `python3` kernelspec running this interpreter with warnings silenced; returns the dir.

    Put the returned directory first on JUPYTER_PATH so it shadows any other `python3` spec.
    """
    spec = jupyter_dir / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    kernel = {
        "argv": [sys.executable, "-Xfrozen_modules=off", "-m", "ipykernel_launcher",
                 "-f", "{connection_file}"],
        "display_name": "Python 3 (mlsys-labs grader)",
        "language": "python",
        "env": KERNEL_ENV,
    }
    (spec / "kernel.json").write_text(json.dumps(kernel, indent=1), encoding="utf-8")
    return jupyter_dir


def worker_env(jupyter_dir: Path) -> dict[str, str]:
    """The nbgrader process's environment: this venv's bin first on PATH (nbgrader runs
    `alembic`, which `make test` does not put there), our kernelspec first on JUPYTER_PATH."""
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")]).rstrip(os.pathsep)
    env["JUPYTER_PATH"] = os.pathsep.join(
        [str(jupyter_dir), env.get("JUPYTER_PATH", "")]).rstrip(os.pathsep)
    env.update({k: v for k, v in KERNEL_ENV.items() if k != "OMP_NUM_THREADS"})
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run_worker(command: list[str], env: dict[str, str], timeout: float,
                echo: Callable[[str], None] | None) -> tuple[int, bool, str]:
    from grader.manifest import REPO_ROOT

    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    tail: list[str] = []
    timed_out = False
    try:
        import selectors

        with selectors.DefaultSelector() as sel:
            sel.register(process.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                if not sel.select(timeout=min(left, 1.0)):
                    if process.poll() is not None:
                        break
                    continue
                line = process.stdout.readline()  # type: ignore[union-attr]
                if not line:
                    break
                line = line.rstrip("\n")
                tail = (tail + [line])[-30:]
                if echo is not None and line.startswith("worksheet "):
                    echo(line)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the kernels go with it
        except (ProcessLookupError, PermissionError):
            pass
        process.wait()
    return process.returncode, timed_out, "\n".join(tail)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


# --- the nbgrader process ---------------------------------------------------------------------


def _worker(course: Path, result_file: Path, cell_timeout: int) -> int:
    """Inside the nbgrader process: generate all, autograde all, write grades as JSON."""
    import logging

    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.converters import Autograde, GenerateAssignment
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    log = course / "nbgrader.log"
    handler = logging.FileHandler(log)
    config = Config()
    config.CourseDirectory.root = str(course)
    config.Execute.timeout = cell_timeout
    config.Execute.kernel_name = "python3"
    config.OverwriteCells.add_missing_cells = True
    db_url = f"sqlite:///{course / 'gradebook.db'}"
    config.CourseDirectory.db_url = db_url
    problems: list[tuple[tuple[str, str], str]] = []

    def run(converter_class, assignment_id: str, student_id: str = "*") -> None:
        coursedir = CourseDirectory(config=config)
        coursedir.assignment_id = assignment_id
        coursedir.student_id = student_id
        converter = converter_class(coursedir=coursedir, config=config)
        converter.log.handlers = [handler]
        converter.log.propagate = False
        converter.force = True
        converter.start()

    assignments = sorted(p.name for p in (course / "source").iterdir())
    run(GenerateAssignment, "*")
    print(f"worksheet release generated: {', '.join(assignments)}", flush=True)
    submitted = course / "submitted"
    pairs = sorted((a.name, s.name) for s in submitted.iterdir() for a in s.iterdir()) \
        if submitted.is_dir() else []
    grades = []
    for assignment_id, student in pairs:
        start = time.perf_counter()
        try:
            run(Autograde, assignment_id, student)
        except Exception as exc:  # nbgrader raises its own exception types, or plain ones
            problems.append(((assignment_id, student), f"nbgrader autograde failed: {exc}"))
        graded = course / "autograded" / student / assignment_id / NOTEBOOK
        if not graded.is_file():
            problems.append(((assignment_id, student), "nbgrader wrote no autograded notebook"))
            continue
        errors = _cell_errors(json.loads(graded.read_text(encoding="utf-8")), cell_timeout)
        with Gradebook(db_url) as gb:
            try:
                notebook = gb.find_submission_notebook("worksheet", assignment_id, student)
            except MissingEntry:
                problems.append(((assignment_id, student), "no grades in the gradebook"))
                continue
            for grade in notebook.grades:
                own, answer, missing = errors.get(grade.name, ("", "", False))
                grades.append({
                    "assignment": assignment_id, "student": student, "grade_id": grade.name,
                    "score": float(grade.auto_score or 0.0), "max_score": float(grade.max_score),
                    "error": own, "answer_error": answer, "not_implemented": missing,
                })
        print(f"worksheet {assignment_id} ({student}): autograded in "
              f"{time.perf_counter() - start:.1f} s", flush=True)
    result_file.write_text(json.dumps({"grades": grades, "problems": problems}), "utf-8")
    return 0


def _cell_errors(notebook: dict, cell_timeout: int) -> dict[str, tuple[str, str, bool]]:
    """grade_id -> (its error, the error of the answer cell above it, answer not implemented)."""
    found: dict[str, tuple[str, str, bool]] = {}
    answer = ("", False)
    for cell in notebook["cells"]:
        meta = nbgrader_meta(cell)
        if cell.get("cell_type") != "code" or not meta:
            continue
        error = _error_line(cell)
        if error.startswith(("KeyboardInterrupt", "CellTimeoutError")):  # nbclient interrupts
            error = f"CellTimeoutError: ran past the {cell_timeout} s limit per cell"
        if meta.get("solution"):
            answer = (error, error.startswith("NotImplementedError"))
        elif meta.get("grade"):
            not_implemented = answer[1] or error.startswith("NotImplementedError")
            found[str(meta.get("grade_id"))] = (error, answer[0], not_implemented)
    return found


def _error_line(cell: dict) -> str:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            value = " ".join(str(output.get("evalue", "")).split())
            return f"{output.get('ename', 'Error')}: {value}".rstrip(": ")
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            text = "".join(output.get("text", ""))
            first = text.strip().splitlines()[0] if text.strip() else ""
            return f"wrote to stderr (nbgrader scores such a cell zero): {first}"
    return ""


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
    for a in with_worksheets(course.select(list(ids)), root, suites):
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
    secret, public = set(), set()
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

    chosen = with_worksheets(course.select(args.ids), args.root)
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


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "_worker":
    raise SystemExit(_worker(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])))

"""The nbgrader process of `grader.worksheets.nbgrade`: generate all, autograde all, write JSON.

    python -m grader.worksheets.nbworker _worker COURSE RESULT_FILE CELL_TIMEOUT

Run by `nbgrade.autograde` in a fresh process with the kernel environment of
`nbgrade.worker_env`; nbgrader is imported here only, never in the grader's own process.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from grader.worksheets.nbgrade import NOTEBOOK, nbgrader_meta

# nbgrader raises only where it could not grade — the kernel did not start, or died, or the
# notebook could not be read; a cell's error or timeout is recorded in the notebook instead. Such
# a failure was seen once in a CI rehearsal (zero2's release, beside a loaded selfcheck), so an
# autograde that raises is tried once more before it is a problem; its cause is kept either way.
AUTOGRADE_RETRIES = 1


def _logged_cause(log: Path, offset: int) -> str:
    """The last error nbgrader logged after `offset` (its exception says only "see the above
    traceback"): the final line of its last traceback, or its last ERROR line; "" if none."""
    try:
        with log.open(encoding="utf-8", errors="replace") as f:
            f.seek(offset)
            lines = [line.strip() for line in f.read().splitlines() if line.strip()]
    except OSError:
        return ""
    ends = [i for i, line in enumerate(lines) if line.startswith("Traceback")]
    if ends:
        tail = lines[ends[-1] + 1:]
        cause = next((line for line in reversed(tail) if not line.startswith(("File ", "["))), "")
        if cause:
            return cause[:300]
    errors = [line for line in lines if "ERROR" in line]
    return errors[-1][:300] if errors else ""


def _without_idle_startup() -> None:
    """Cut two start-up costs of nbgrader that grade nothing (together about 5 s of CPU, half
    a worksheet's grading): jsonschema's optional IRI format check, whose `rfc3987_syntax`
    builds dozens of parsers when imported (nbformat never checks that format), and the
    `alembic heads` subprocess a fresh gradebook starts to learn the head revision of nbgrader's
    migrations, read here in-process from the same scripts."""
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
    import nbgrader
    import nbgrader.api
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory(str(Path(nbgrader.__file__).parent / "alembic"))
    head = scripts.get_current_head()
    if head:
        nbgrader.api.get_alembic_version = lambda: head


def _worker(course: Path, result_file: Path, cell_timeout: int) -> int:
    """Inside the nbgrader process: generate all, autograde all, write grades as JSON."""
    import logging

    _without_idle_startup()
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
        for attempt in range(1 + AUTOGRADE_RETRIES):
            logged = log.stat().st_size if log.exists() else 0
            try:
                run(Autograde, assignment_id, student)
                failure = ""
                break
            except Exception as exc:  # noqa: BLE001 - nbgrader raises its own types, or plain ones
                failure = f"nbgrader autograde failed: {_logged_cause(log, logged) or exc}"
            if attempt < AUTOGRADE_RETRIES:
                print(f"worksheet {assignment_id} ({student}): {failure}; once more",
                      flush=True)
        if failure:
            problems.append(((assignment_id, student), failure))
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


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "_worker":
    raise SystemExit(_worker(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])))

"""Reading a class: every graded submission under a folder, validated, or a gradebook's scores.

The folder holds one subfolder per student; anywhere under it, each `results.json` is one graded
run (one pull request's artefact), and the editable modules graded in that run may lie beside it
as `assignments/<id>/<module>.py` (the layout of the course tree):

    class/alice/run-0003/results.json
    class/alice/run-0003/assignments/ring_allreduce/ring.py

A student with several runs of one assignment is represented by the last run in path order
(name run folders by date or run number). Nothing read is trusted: a results.json is size-
limited, validated against the schema and checked for whole-number scores that add up
(`grader.report.gradescope`), and must be of this course's name and version; one that fails is
skipped and listed with its path and why. Reasons are clipped to one line of `REASON_CHARS`; the
renderer escapes every string.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.manifest import Assignment, Course
from grader.report.gradescope import SCHEMA, ResultsJsonError, read_json, run_of
from grader.report.results import TestResult, clip_reason

RESULTS = "results.json"
MAX_MODULE_BYTES = 512 * 1024  # pr-apply refuses larger submitted files; so do we
MAX_NAME_CHARS = 80


@dataclass(frozen=True)
class Submission:
    """One student's graded run of one assignment."""

    student: str
    assignment: str
    source: str  # the results.json it came from, relative to the class folder ("" from a gradebook)
    score: float
    max_score: float
    tests: tuple[TestResult, ...] = ()
    code: dict[str, str] = field(default_factory=dict)  # module name -> submitted text
    parts: dict[str, float] = field(default_factory=dict)  # gradebook cell -> points earned


@dataclass
class ClassData:
    """A class as read: submissions by (student, assignment), and what was refused."""

    course: Course
    submissions: dict[tuple[str, str], Submission] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    origin: str = "results"  # "results" (a folder) or "gradebook"

    @property
    def students(self) -> list[str]:
        return sorted({s for s, _ in self.submissions})

    def of_assignment(self, assignment_id: str) -> list[Submission]:
        """The submissions of one assignment, by student."""
        return [self.submissions[k] for k in sorted(self.submissions) if k[1] == assignment_id]


Progress = Callable[[str], None]


def stderr_progress(message: str) -> None:
    """The default progress line: on stderr, overwritten in place on a terminal."""
    if sys.stderr.isatty():
        print(f"\r{message:<78}", end="", file=sys.stderr, flush=True)
    else:
        print(message, file=sys.stderr, flush=True)


def read_class(folder: Path, course: Course, progress: Progress | None = stderr_progress,
               every: int = 25, workers: int = 2) -> ClassData:
    """Every results.json under `folder/<student>/`, validated; see the module docstring.
    Many files are read by `workers` forked processes, in path order all the same."""
    import multiprocessing

    global _VALIDATOR
    _VALIDATOR = _validator()
    data = ClassData(course)
    files = sorted(_results_files(folder))
    jobs = [(path, path.relative_to(folder).as_posix(), course) for path in files]
    pool = None
    if workers > 1 and len(jobs) >= 64:
        pool = multiprocessing.get_context("fork").Pool(workers)
        results: Iterator[Any] = pool.imap(_read_job, jobs, chunksize=8)
    else:
        results = map(_read_job, jobs)
    try:
        for number, ((_, relative, _), (found, why)) in enumerate(zip(jobs, results), start=1):
            for submission in found:
                data.submissions[(submission.student, submission.assignment)] = submission
            if why:
                data.skipped.append((relative, why))
            if progress and (number % every == 0 or number == len(files)):
                progress(f"read {number}/{len(files)} results files "
                         f"({len(data.skipped)} skipped)")
    finally:
        if pool is not None:
            pool.terminate()
    return data


_VALIDATOR: Any = None


def _validator() -> Any:
    """A validator of results.schema.json with its local `$ref`s inlined: the same schema,
    checked several times faster (no reference resolution per test)."""
    import jsonschema

    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    definitions = schema.get("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if isinstance(ref, str) and ref.startswith("#/$defs/") and len(node) == 1:
                return inline(definitions[ref.removeprefix("#/$defs/")])
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    schema = inline(schema)
    return jsonschema.Draft202012Validator(schema)


def _read_job(job: tuple[Path, str, Course]) -> tuple[list[Submission], str]:
    path, relative, course = job
    try:
        return _read_one(path, relative, course, _VALIDATOR), ""
    except ResultsJsonError as exc:
        return [], clip_reason(str(exc))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # what the schema allows
        return [], clip_reason(f"not a grader results file: {type(exc).__name__} {exc}")


def _results_files(folder: Path) -> Iterator[Path]:
    for student in sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()):
        for path in student.rglob(RESULTS):
            if path.is_file() and not path.is_symlink():
                yield path


def student_name(relative: str) -> str:
    """The student of a results file: its first folder under the class folder."""
    return relative.split("/", 1)[0]


def _read_one(path: Path, relative: str, course: Course, validator: Any) -> list[Submission]:
    document = read_json(path)
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(top level)"
        raise ResultsJsonError(f"not a grader results file: at {where}: {errors[0].message}")
    if "extra_data" not in document:
        raise ResultsJsonError("not a grader results file: no extra_data")
    meta = document["extra_data"]["course"]
    if (meta.get("name"), meta.get("version")) != (course.name, course.version):
        raise ResultsJsonError(f"graded for course {meta.get('name')!r} {meta.get('version')!r},"
                               f" not {course.name} {course.version}")
    run = run_of(document)  # whole-number scores that match outcomes and add up
    student = student_name(relative)
    if len(student) > MAX_NAME_CHARS:
        raise ResultsJsonError(f"student folder name over {MAX_NAME_CHARS} characters")
    known = set(course.ids)
    unknown = sorted({t.assignment for t in run.tests} - known)
    if unknown:
        raise ResultsJsonError(f"tests of assignments not in the course: {unknown[:3]}")
    found = []
    for score in run.by_assignment(course.ids):
        tests = tuple(_clipped(t) for t in score.tests)
        code = read_code(path.parent, course.get(score.id))
        found.append(Submission(student, score.id, relative, score.score, score.max_score,
                                tests, code))
    return found


def _clipped(test: TestResult) -> TestResult:
    from dataclasses import replace

    return replace(test, name=clip_reason(test.name), reason=clip_reason(test.reason))


def read_code(run_folder: Path, assignment: Assignment) -> dict[str, str]:
    """The editable modules beside a results.json: module -> text (absent, oversized, linked or
    undecodable files are left out)."""
    code = {}
    for module in assignment.modules:
        path = run_folder / "assignments" / assignment.id / f"{module}.py"
        try:
            if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_MODULE_BYTES:
                continue
            code[module] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return code


def read_gradebook(db: Path, course: Course) -> ClassData:
    """The scores of an nbgrader gradebook written by `gradebook import`: one submission per
    (student, assignment) with the points of each grade cell; no tests, no code."""
    from nbgrader.api import MissingEntry

    from grader.instructor.gradebook import cells_of, open_gradebook

    data = ClassData(course, origin="gradebook")
    layout = cells_of(course)
    with open_gradebook(db, course) as gb:
        for student in sorted(gb.students, key=lambda s: s.id):
            name = clip_reason(str(student.id))
            for assignment_id, cells in layout.items():
                try:
                    submission = gb.find_submission(assignment_id, student.id)
                except MissingEntry:
                    continue
                parts = {f"{nb.name}/{g.name}": float(g.auto_score or 0.0)
                         for nb in submission.notebooks for g in nb.grades}
                data.submissions[(name, assignment_id)] = Submission(
                    name, assignment_id, "", sum(parts.values()),
                    float(sum(m for _, _, m in cells)), parts=parts)
    return data

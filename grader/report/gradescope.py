"""results.json: a graded run in Gradescope's autograder schema, written and read back here only.

- `gradescope_json()` / `write_results_json()`: the run as Gradescope's results.json (top-level
  `score`, `tests[]` with `name`, `score`, `max_score`, `status`, `output`, `visibility`),
  following `grader/schemas/results.schema.json`. Hidden-suite tests are `visible` too:
  students are meant to see their name, points and short reason; the suite is in `tags`.
- `load_results_json()`: read one back, trusting nothing: under `MAX_INPUT_BYTES`, valid against
  the schema (jsonschema, imported only here: the pr-comment job installs nothing else).
- `run_of()`: the `RunResult` behind a loaded document, with every score a whole number that
  matches its outcome and totals that add up (pr-comment renders the comment from it).

Readers are the PR comment job (`grader/pr/comment.py`) and the gradebook import
(`grader/instructor/gradebook.py`); the reports module writes through here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grader.report.results import NOT_GRADED_HERE, RunResult, TestResult, clip_reason, error_summary

RESULTS_JSON = "results.json"
SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "results.schema.json"
MAX_INPUT_BYTES = 16 * 2**20


class ResultsJsonError(ValueError):
    """A results.json that cannot be used: missing, oversized, malformed or inconsistent."""


# --- writing ----------------------------------------------------------------------------------


def gradescope_json(run: RunResult, order: tuple[str, ...] = (),
                    course: Mapping[str, str] | None = None) -> dict:
    """The run in Gradescope's results.json format; assignments in `order` (course order).

    Worksheet cells are tests like the others, with `extra_data.part` = "worksheet"; each
    assignment's totals list its parts. `extra_data.course` is the manifest's name and
    version ("" when not given).
    """
    tests = []
    ordered = [t for a in run.by_assignment(order) for t in a.tests]
    for number, test in enumerate(ordered, start=1):
        tests.append({
            "name": f"{test.assignment}: {test.name}",
            "number": str(number),
            "score": test.score,
            "max_score": test.max_score,
            # Never "passed" for an ungraded GPU test: 0 of 0 points, reported as not run.
            "status": "passed" if test.passed else "failed",
            "output": _output(test),
            "visibility": "visible",
            "tags": [test.assignment, test.visibility],
            "extra_data": {
                "nodeid": test.nodeid if test.visibility == "public" else "",
                "outcome": test.outcome,
                "points": test.points,
                "not_implemented": test.not_implemented,
                "not_graded_here": test.not_graded_here,
                "part": test.part,
            },
        })
    totals = {
        a.id: {
            "score": a.score, "max_score": a.max_score,
            "parts": {p: {"score": sc, "max_score": mx} for p, (sc, mx) in a.parts().items()},
        }
        for a in run.by_assignment(order)
    }
    course = dict(course or {})
    return {
        "score": run.score,
        "execution_time": round(run.duration),  # whole seconds, as Gradescope shows them
        "output": _overall_line(run),
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "extra_data": {
            "impl": run.impl,
            "course": {"name": course.get("name", ""), "version": course.get("version", "")},
            "max_score": run.max_score,
            "assignments": totals,
            "collection_errors": [clip_reason(error_summary(e)) for e in run.collection_errors],
            "sandbox": dict(run.sandbox),
        },
        "tests": tests,
    }


def write_results_json(run: RunResult, out_dir: Path, order: tuple[str, ...] = (),
                       course: Mapping[str, str] | None = None) -> Path:
    """Write `out_dir/results.json`; `course` ({"name", "version"}) lets a gradebook refuse
    results of another course version."""
    path = out_dir / RESULTS_JSON
    text = json.dumps(gradescope_json(run, order, course), indent=2, ensure_ascii=False)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def _output(test: TestResult) -> str:
    if test.passed:
        return f"passed ({test.points} points)"
    text = " ".join(test.feedback.split())
    if test.not_graded_here:
        return f"{text}; its {test.points} points are excluded from the maximum"
    return text


def _overall_line(run: RunResult) -> str:
    line = f"{run.score} / {run.max_score} points ({run.impl})"
    excluded = sum(t.points for t in run.tests if t.not_graded_here)
    if excluded:
        line += f"; {excluded} points of GPU-only tests {NOT_GRADED_HERE}"
    return line


# --- reading ----------------------------------------------------------------------------------


def read_json(path: Path) -> Any:
    """Parse a JSON file written by a grading job, refusing oversized or malformed ones."""
    try:
        size = path.stat().st_size
        if size > MAX_INPUT_BYTES:
            raise ResultsJsonError(f"{path.name}: {size} bytes, over the {MAX_INPUT_BYTES} limit")
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ResultsJsonError(f"{path.name} is missing") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsJsonError(f"{path.name}: not a readable results file ({exc})") from exc


def load_results_json(path: Path) -> dict:
    """A results.json, read with `read_json` and validated against the schema."""
    import jsonschema

    document = read_json(path)
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    try:
        jsonschema.validate(document, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        hint = ""
        if list(exc.absolute_path) == ["extra_data"] and "course" in exc.message:
            hint = " (written by a grader older than the course version field: grade again)"
        raise ResultsJsonError(f"{path.name} is not a grader results file: at {where}: "
                               f"{clip_reason(exc.message)}{hint}") from exc
    return document


def run_of(document: dict) -> RunResult:
    """The run behind a validated document: whole-number scores that match each test's outcome
    and points, and a total that is their sum."""
    tests = [_test(item, f"{RESULTS_JSON} tests[{number}]")
             for number, item in enumerate(document["tests"])]
    total = sum(t.score for t in tests)
    _whole(document["score"], f"{RESULTS_JSON} score")
    if document["score"] != total:
        raise ResultsJsonError(f"{RESULTS_JSON} score {document['score']} is not the sum of "
                               f"the test scores ({total})")
    extra = document["extra_data"]
    sandbox = tuple((str(k), str(v)) for k, v in extra.get("sandbox", {}).items())
    return RunResult(str(extra["impl"]), tuple(tests),
                     tuple(str(e) for e in extra["collection_errors"]), 0, sandbox)


def _whole(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ResultsJsonError(f"{where}: {value!r} is not a whole number of points")
    return value


def _test(item: dict, where: str) -> TestResult:
    extra = item.get("extra_data")
    tags = item.get("tags", [])
    if not isinstance(extra, dict) or len(tags) != 2 or tags[1] not in ("public", "hidden"):
        raise ResultsJsonError(f"{where}: needs extra_data and tags [assignment, visibility]")
    points = _whole(extra["points"], f"{where}.extra_data.points")
    score = _whole(item["score"], f"{where}.score")
    max_score = _whole(item["max_score"], f"{where}.max_score")
    passed = item["status"] == "passed"
    if passed != (extra["outcome"] == "passed") or score != (points if passed else 0) \
            or max_score != (0 if extra["not_graded_here"] else points):
        raise ResultsJsonError(f"{where}: score {score}/{max_score} does not match its outcome "
                               f"{extra['outcome']!r} and {points} points")
    assignment, _, name = item["name"].partition(": ")
    if assignment != tags[0] or not name:
        raise ResultsJsonError(f"{where}.name: expected '<assignment>: <test>'")
    reason = "" if passed else item["output"]
    if extra["outcome"] == "skipped":
        reason = reason.removeprefix("skipped: ")
    return TestResult(
        nodeid=str(extra.get("nodeid", "")), name=name, assignment=assignment,
        visibility=tags[1], points=points, outcome=extra["outcome"], reason=reason,
        not_implemented=bool(extra["not_implemented"]),
        not_graded_here=bool(extra["not_graded_here"]), part=extra.get("part", "suite"),
    )

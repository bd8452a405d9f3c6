"""What one graded pytest run produced, and the score it earns.

The plugin (`--mlsys-results PATH`) writes the run with `RunResult.save()`; `RunResult.load()`
reads it back into frozen dataclasses, validating every field so a malformed file fails loudly
here rather than as a wrong score later. (The Gradescope results.json made from a run is
`grader/report/gradescope.py`.) Every reason shown for a test is at most `REASON_CHARS` characters,
cut by `clip_reason`. Scoring rules, in one place:

- a test earns its points only when it passed; failed, errored and skipped tests earn 0;
- a GPU-only test skipped on a machine without a GPU (`not_graded_here`) earns 0 *and* leaves
  the attainable maximum, so a CPU-only grade is out of fewer points (reports say so);
- any other skip still counts towards the maximum: a skip is never a pass.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

OUTCOMES = ("passed", "failed", "skipped", "error")
PARTS = ("suite", "worksheet")  # pytest suites; the nbgrader worksheet (grader/worksheets/)
NOT_IMPLEMENTED = "not implemented yet"
NOT_GRADED_HERE = "not graded on this machine"
# The longest reason a test reports, anywhere: results files, comments, tables, junit.xml.
REASON_CHARS = 200


def clip_reason(text: str) -> str:
    """`text` on one line, cut to `REASON_CHARS` with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


class ResultsError(ValueError):
    """The plugin's results file is missing or does not follow the contract."""


@dataclass(frozen=True)
class TestResult:
    """One collected grading test, as the plugin reported it."""

    nodeid: str
    name: str
    assignment: str
    visibility: str  # "public" or "hidden"
    points: int
    outcome: str  # one of OUTCOMES
    reason: str = ""
    not_implemented: bool = False
    not_graded_here: bool = False
    duration: float = 0.0
    part: str = "suite"  # one of PARTS
    # Worst observed error / tolerance over the test's comparisons (None: it compared nothing
    # with a tolerance); selfcheck's margin report, never shown to students.
    margin: float | None = None
    margin_at: str = ""
    # The public names of the module under test the test calls (@pytest.mark.exercises):
    # selfcheck's partial-credit check holds each test to them.
    exercises: tuple[str, ...] = ()
    # Selfcheck only: not run for this variant, since it ran none of the code the variant
    # changes; the outcome is the reference's (grader/instructor/plugin_coverage.py).
    inferred: bool = False
    # Its place in the suite's order (pytest's collection order: files, then tests as the file
    # defines them, unit tests before the integration tests that use them); reports list tests
    # in this order, and "the first failing test" is the first in it. 0 when unknown.
    order: int = 0

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"

    @property
    def score(self) -> int:
        return self.points if self.passed else 0

    @property
    def max_score(self) -> int:
        return 0 if self.not_graded_here else self.points

    @property
    def feedback(self) -> str:
        """The one-line verdict shown to students ("" for a pass)."""
        if self.passed:
            return ""
        if self.not_graded_here:
            return _prefixed(NOT_GRADED_HERE, self.reason)
        if self.not_implemented:
            return _prefixed(NOT_IMPLEMENTED, self.reason)
        if self.outcome == "skipped":
            return f"skipped: {self.reason}" if self.reason else "skipped"
        return self.reason or self.outcome


def error_summary(error: str) -> str:
    """One safe line for a collection error: where, and the exception's last line.

    The plugin's text is a traceback tail that can quote lines of a hidden suite; reports show
    only `<node id>: <ExceptionType: message>` (run pytest on the file for the traceback).
    """
    where, _, detail = error.partition(": ")
    lines = [line.strip() for line in detail.splitlines() if line.strip()]
    raised = [line[1:].strip() for line in lines if line.startswith("E ")]
    last = raised[-1] if raised else (lines[-1] if lines else "")
    return f"{where}: {last}" if last else where


def _prefixed(verdict: str, reason: str) -> str:
    """`verdict`, followed by the reason's detail unless the reason already starts with it."""
    if not reason or reason == verdict:
        return verdict
    return reason if reason.startswith(verdict) else f"{verdict}: {reason}"


@dataclass(frozen=True)
class AssignmentScore:
    """Totals of one assignment within a run."""

    id: str
    tests: tuple[TestResult, ...]

    @property
    def score(self) -> int:
        return sum(t.score for t in self.tests)

    @property
    def max_score(self) -> int:
        return sum(t.max_score for t in self.tests)

    @property
    def excluded_points(self) -> int:
        """Points of GPU-only tests not graded on this machine."""
        return sum(t.points for t in self.tests if t.not_graded_here)

    def parts(self) -> dict[str, tuple[int, int]]:
        """(score, max_score) per part present, in PARTS order."""
        return {
            part: (sum(t.score for t in tests), sum(t.max_score for t in tests))
            for part in PARTS
            if (tests := [t for t in self.tests if t.part == part])
        }

    def count(self, which: str) -> int:
        """Number of tests that `passed`, `failed` (incl. errors and skips), or are `excluded`."""
        if which == "passed":
            return sum(t.passed for t in self.tests)
        if which == "excluded":
            return sum(t.not_graded_here for t in self.tests)
        return sum(not t.passed and not t.not_graded_here for t in self.tests)


@dataclass(frozen=True)
class RunResult:
    """The whole run: implementation graded, tests in collection order, errors, exit status."""

    impl: str
    tests: tuple[TestResult, ...]
    collection_errors: tuple[str, ...] = ()
    exitstatus: int = 0
    # The sandbox the ranks ran in: {"mode", "summary", ...} from harness/sandbox.py, or {}.
    sandbox: tuple[tuple[str, str], ...] = ()
    # Tests not run because this implementation had already failed one (stop at first failure
    # in a session grading several implementations): neither passed nor failed.
    not_run: tuple[str, ...] = ()
    # Where the session's time went (seconds): "collected", "forkserver", "launches", "session"
    # (see grader.session.plugin); shared by every implementation of a multi-implementation session.
    timing: tuple[tuple[str, float], ...] = ()

    @property
    def sandbox_summary(self) -> str:
        """One line such as "sandbox: full" or "sandbox: degraded — no bwrap" ("" if unknown)."""
        return dict(self.sandbox).get("summary", "")

    @property
    def score(self) -> int:
        return sum(t.score for t in self.tests)

    @property
    def max_score(self) -> int:
        return sum(t.max_score for t in self.tests)

    @property
    def duration(self) -> float:
        return sum(t.duration for t in self.tests)

    def by_assignment(self, order: tuple[str, ...] = ()) -> list[AssignmentScore]:
        """Per-assignment totals: ids in `order` first (course order), then any others; each
        assignment's tests in the suite's order (`ordered`)."""
        ids = [i for i in order if any(t.assignment == i for t in self.tests)]
        ids += sorted({t.assignment for t in self.tests} - set(ids))
        ordered = self.ordered()
        return [AssignmentScore(i, tuple(t for t in ordered if t.assignment == i)) for i in ids]

    def ordered(self) -> list[TestResult]:
        """The tests in report order: suites before the worksheet, public tests first, then
        the suite's own order (`TestResult.order`); whatever order xdist finished them in."""
        return sorted(self.tests, key=_report_order)

    def to_json(self) -> dict[str, Any]:
        """The plugin's results file: what `from_json` reads."""
        return {
            "impl": self.impl,
            "sandbox": dict(self.sandbox),
            "tests": [asdict(t) for t in self.tests],
            "collection_errors": list(self.collection_errors),
            "exitstatus": self.exitstatus,
            "not_run": list(self.not_run),
            "timing": dict(self.timing),
        }

    def save(self, path: Path) -> None:
        """Write the run where `load` reads it (the plugin's `--mlsys-results PATH`)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1))

    @staticmethod
    def save_all(runs: list[RunResult], path: Path) -> None:
        """Write the runs of a session that graded several implementations: {"runs": [...]}."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"runs": [run.to_json() for run in runs]}, indent=1))

    @classmethod
    def load_all(cls, path: Path) -> list[RunResult]:
        """Every run in a results file, whether it holds one implementation or several."""
        data = _read_json(path)
        if isinstance(data, dict) and "runs" in data:
            runs = _field(data, "runs", list, str(path))
            return [cls.from_json(run, f"{path}: runs[{i}]") for i, run in enumerate(runs)]
        return [cls.from_json(data, str(path))]

    @classmethod
    def load(cls, path: Path) -> RunResult:
        """Read the plugin's JSON file; `ResultsError` when missing or malformed."""
        return cls.from_json(_read_json(path), str(path))

    @classmethod
    def from_json(cls, data: Any, source: str = "results") -> RunResult:
        """Build from parsed JSON, checking the plugin contract field by field."""
        if not isinstance(data, dict):
            raise ResultsError(f"{source}: expected a JSON object")
        impl = _field(data, "impl", str, source)
        tests = _field(data, "tests", list, source)
        errors = _field(data, "collection_errors", list, source)
        exitstatus = _field(data, "exitstatus", int, source)
        parsed = tuple(_test(item, f"{source}: tests[{i}]") for i, item in enumerate(tests))
        sandbox = data.get("sandbox", {})
        if not isinstance(sandbox, dict):
            raise ResultsError(f"{source}.sandbox: expected an object, got {sandbox!r}")
        plain = tuple((str(k), str(v)) for k, v in sandbox.items()
                      if isinstance(v, (str, int, float, bool)))
        not_run = data.get("not_run", [])
        timing = data.get("timing", {})
        if not isinstance(not_run, list) or not isinstance(timing, dict):
            raise ResultsError(f"{source}: not_run must be a list and timing an object")
        times = tuple((str(k), float(v)) for k, v in timing.items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool))
        return cls(impl, parsed, tuple(str(e) for e in errors), exitstatus, plain,
                   tuple(str(n) for n in not_run), times)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ResultsError(f"{path}: the pytest run wrote no results file") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: unreadable results file: {exc}") from exc


def _report_order(test: TestResult) -> tuple:
    """Suites before the worksheet; public tests first, then in the suite's order (collection
    order: a file's unit tests before its integration tests, never alphabetical), then by node
    id with numbers compared as numbers (`[2]` < `[10]`) where no order is known. Worksheet
    cells keep their notebook order.

    Under xdist the plugin lists tests as they finish; reports must not depend on that.
    """
    if test.part != "suite":
        return (PARTS.index(test.part), 0, 0, ())
    natural = tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", test.nodeid))
    return (0, test.visibility != "public", test.order, natural)


_TEST_FIELDS: dict[str, type | tuple[type, ...]] = {
    "nodeid": str,
    "name": str,
    "assignment": str,
    "visibility": str,
    "points": int,
    "outcome": str,
    "reason": str,
    "not_implemented": bool,
    "not_graded_here": bool,
    "duration": (int, float),
}


def _test(item: Any, where: str) -> TestResult:
    if not isinstance(item, dict):
        raise ResultsError(f"{where}: expected an object")
    values = {name: _field(item, name, kind, where) for name, kind in _TEST_FIELDS.items()}
    if values["outcome"] not in OUTCOMES:
        raise ResultsError(f"{where}.outcome: {values['outcome']!r} is not one of {OUTCOMES}")
    if values["visibility"] not in ("public", "hidden"):
        raise ResultsError(f"{where}.visibility: {values['visibility']!r} is not public/hidden")
    if values["points"] < 0:
        raise ResultsError(f"{where}.points: negative ({values['points']})")
    values["duration"] = float(values["duration"])
    values["part"] = item.get("part", "suite")  # optional: the plugin writes suites only
    if values["part"] not in PARTS:
        raise ResultsError(f"{where}.part: {values['part']!r} is not one of {PARTS}")
    margin = item.get("margin")  # optional: only tests that compared with a tolerance
    if margin is not None and (isinstance(margin, bool) or not isinstance(margin, (int, float))):
        raise ResultsError(f"{where}.margin: expected a number or null, got {margin!r}")
    values["margin"] = None if margin is None else float(margin)
    values["margin_at"] = str(item.get("margin_at", ""))
    exercises = item.get("exercises", [])
    if not isinstance(exercises, list) or not all(isinstance(e, str) for e in exercises):
        raise ResultsError(f"{where}.exercises: expected a list of names, got {exercises!r}")
    values["exercises"] = tuple(exercises)
    inferred = item.get("inferred", False)  # optional: selfcheck's variants only
    if not isinstance(inferred, bool):
        raise ResultsError(f"{where}.inferred: expected a bool, got {inferred!r}")
    values["inferred"] = inferred
    order = item.get("order", 0)  # optional: results written before it existed
    if isinstance(order, bool) or not isinstance(order, int) or order < 0:
        raise ResultsError(f"{where}.order: expected a non-negative int, got {order!r}")
    values["order"] = order
    return TestResult(**values)


def _field(table: dict[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    if name not in table:
        raise ResultsError(f"{where}.{name}: missing")
    value = table[name]
    is_bool = isinstance(value, bool)
    wrong_bool = is_bool and kind is not bool
    if not isinstance(value, kind) or wrong_bool:
        raise ResultsError(f"{where}.{name}: expected {_kind_name(kind)}, got {value!r}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)

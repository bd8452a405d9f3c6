"""Selfcheck's verdicts on finished sessions: solution, stub, mutants, points, signatures and
the tolerance margins."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from grader.instructor.sessions import variation_text
from grader.instructor.signatures import compare_files
from grader.manifest import Assignment
from grader.report.results import RunResult, error_summary
from grader.session.runner import Session


@dataclass
class MarginReport:
    """The worst margins of an assignment's solution runs: {(test node id): (ratio, where)}."""

    worst: dict[str, tuple[float, str]] = field(default_factory=dict)

    def add(self, run: RunResult, variation: tuple[int, int]) -> None:
        for t in graded(run):
            if t.margin is None:
                continue
            where = f"{t.margin_at} [{variation_text(variation)}]"
            if t.nodeid not in self.worst or t.margin > self.worst[t.nodeid][0]:
                self.worst[t.nodeid] = (t.margin, where)

    def breaches(self) -> list[str]:
        from grader.compare import MAX_MARGIN  # torch: not at the command line's start

        return [
            f"{nodeid}: the solution uses {ratio:.2f} of its tolerance at {where}; above "
            f"{MAX_MARGIN} it passes by luck (derive the bound in grader/compare.py)"
            for nodeid, (ratio, where) in sorted(self.worst.items())
            if ratio > MAX_MARGIN
        ]

    @property
    def worst_ratio(self) -> float:
        return max((ratio for ratio, _ in self.worst.values()), default=0.0)

    def summary(self) -> str:
        if not self.worst:
            return "no toleranced comparison"
        nodeid, (ratio, where) = max(self.worst.items(), key=lambda item: item[1][0])
        return f"worst {ratio:.2f} in {nodeid.rsplit('/', 1)[-1]}: {where}"


@dataclass
class Verdict:
    """The state of one check of one assignment; `breaches` empty means it holds."""

    breaches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    ran: bool = False
    sessions: int = 0


def judge_solution(session: Session) -> list[str]:
    """Breaches of "the solution scores full marks"."""
    run, problems = usable(session, "solution")
    if run is None:
        return problems
    return problems + [
        f"solution fails {t.nodeid}: {t.feedback}" for t in graded(run) if not t.passed
    ]


def judge_independent(session: Session, not_attempted: set[str]) -> list[str]:
    """Breaches of "an independent correct implementation gets every point" (fairness,
    docs/design.md principle 5): every graded test passes, except the tests of optional parts
    it leaves out on purpose (`not_attempted`, test names as `test_x[param]`), which must
    score nothing."""
    run, problems = usable(session, "independent implementation")
    if run is None:
        return problems
    for t in graded(run):
        name = t.nodeid.rsplit("::", 1)[-1]
        if name in not_attempted:
            if t.score:
                problems.append(f"independent implementation earns {t.score} point(s) in "
                                f"{t.nodeid}, a part it does not attempt")
        elif not t.passed:
            problems.append(f"independent implementation (a correct one) fails {t.nodeid}: "
                            f"{t.feedback}")
    return problems


def not_attempted(root: Path, assignment: str) -> set[str]:
    """Tests of optional parts (a stretch goal) an independent implementation leaves out on
    purpose, one per line in `grader/tests/independent/<id>/NOT_ATTEMPTED` (# comments)."""
    listed = independent_root(root) / assignment / "NOT_ATTEMPTED"
    if not listed.is_file():
        return set()
    lines = listed.read_text(encoding="utf-8").splitlines()
    return {line.split("#")[0].strip() for line in lines} - {""}


def independent_root(root: Path) -> Path:
    """Where the independent implementations live, laid out like assignments/."""
    return root / "grader" / "tests" / "independent"


def judge_stub(session: Session) -> list[str]:
    """Breaches of "the stub scores zero, every test failing with not implemented"."""
    run, problems = usable(session, "stub")
    if run is None:
        return problems
    for t in graded(run):
        if t.passed and not t.points:  # a 0-point gate (the static screen) grades nothing
            continue
        if t.passed:
            problems.append(f"stub passes {t.nodeid}: a test the stub passes grades nothing")
        elif not t.not_implemented:
            problems.append(
                f"stub fails {t.nodeid} for another reason than 'not implemented': {t.feedback}"
            )
    return problems


def judge_mutant(session: Session, name: str) -> tuple[str, list[str]]:
    """(who caught the mutant, breaches): a mutant must fail at least one graded test."""
    run, problems = usable(session, f"mutant {name}")
    if run is None:
        return "", problems
    failed = [t for t in graded(run) if not t.passed]
    if not failed:
        return "", problems + [f"mutant {name} passes every test: no test catches it"]
    return f"mutant {name}: caught by {failed[0].nodeid} ({failed[0].feedback})", problems


def judge_points(run: RunResult, assignment: Assignment) -> list[str]:
    """Breaches of "the suites' points add up to the manifest"."""
    tests = [t for t in run.tests if t.assignment == assignment.id]
    total = sum(t.points for t in tests)
    public = sum(t.points for t in tests if t.visibility == "public")
    problems = []
    if total != assignment.points:
        problems.append(
            f"suites carry {total} points, the manifest says points = {assignment.points}"
        )
    if public != assignment.public_points:
        problems.append(
            f"public tests carry {public} points, the manifest says "
            f"public_points = {assignment.public_points}"
        )
    return problems


def check_signatures(assignment: Assignment, root: Path) -> list[str]:
    """Stub vs solution API differences for every module of the assignment."""
    problems = []
    for module in assignment.modules:
        stub = root / "assignments" / assignment.id / f"{module}.py"
        solution = root / "solutions" / assignment.id / f"{module}.py"
        problems += [f"{module}.py: {d}" for d in compare_files(stub, solution)]
    return problems


def usable(session: Session, what: str) -> tuple[RunResult | None, list[str]]:
    """The run if it can be judged, plus breaches about the session itself."""
    problems = []
    if session.timed_out:
        problems.append(f"{what}: the session hung and was killed: {session.problem}")
    elif session.problem:
        problems.append(f"{what}: {session.problem}")
    run = session.result
    if run is not None:
        problems += [f"{what}: collection error: {error_summary(e)}"
                     for e in run.collection_errors]
        if not run.tests:
            problems.append(f"{what}: no graded test was collected")
    if run is None and not problems:
        problems.append(f"{what}: the session produced no results")
    return run, problems


def graded(run: RunResult) -> list:
    """Tests that count on this machine (GPU-only tests skipped here do not), in report order
    (the suite's: the first failing one is the most specific)."""
    return [t for t in run.ordered() if not t.not_graded_here]

"""What a class's submissions say about an assignment: scores, points lost per test, reasons.

Pure functions of `Submission`s (no I/O), so the HTML, the CSV and the tests read the same
numbers.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from grader.instructor.classview.collect import Submission

# A test failed by at least this share of the class is "nearly everyone fails it".
NEARLY_ALL = 0.8
TOP_REASONS = 10


@dataclass(frozen=True)
class TestRow:
    """One test across the class."""

    name: str
    visibility: str
    points: int
    graded: int  # submissions that ran it (not "not graded here")
    failed: int
    points_lost: int

    @property
    def fail_share(self) -> float:
        return self.failed / self.graded if self.graded else 0.0


@dataclass(frozen=True)
class AssignmentStats:
    """One assignment across the class."""

    assignment: str
    submissions: int
    max_score: float
    scores: tuple[float, ...]
    tests: tuple[TestRow, ...]  # by points lost, most first
    # (test, first line, count), most frequent first; the HTML shows the first TOP_REASONS
    reasons: tuple[tuple[str, str, int], ...]

    @property
    def mean(self) -> float:
        return sum(self.scores) / len(self.scores) if self.scores else 0.0

    @property
    def nearly_all_fail(self) -> tuple[TestRow, ...]:
        """Tests at least `NEARLY_ALL` of the class fails: a contract worth re-reading."""
        return tuple(t for t in self.tests if t.graded and t.fail_share >= NEARLY_ALL)

    @property
    def nobody_fails(self) -> tuple[TestRow, ...]:
        return tuple(t for t in self.tests if t.graded and t.failed == 0)


def assignment_stats(assignment: str, submissions: list[Submission]) -> AssignmentStats:
    """The statistics of `submissions` (all of `assignment`). A reason is a failure's first
    line; "not implemented" failures are counted in points lost but not among the reasons,
    which are there to show what students who tried were told."""
    rows: dict[str, list[int]] = {}  # name -> [graded, failed, points lost, points]
    visibility: dict[str, str] = {}
    reasons: Counter[tuple[str, str]] = Counter()
    for submission in submissions:
        for test in submission.tests:
            row = rows.setdefault(test.name, [0, 0, 0, test.points])
            visibility[test.name] = test.visibility
            if test.not_graded_here:
                continue
            row[0] += 1
            row[3] = max(row[3], test.points)
            if not test.passed:
                row[1] += 1
                row[2] += test.points
                if not test.not_implemented:
                    reasons[(test.name, first_line(test.feedback))] += 1
    tests = sorted(
        (TestRow(name, visibility[name], points, graded, failed, lost)
         for name, (graded, failed, lost, points) in rows.items()),
        key=lambda t: (-t.points_lost, -t.failed, t.name))
    common = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    return AssignmentStats(
        assignment, len(submissions),
        max((s.max_score for s in submissions), default=0.0),
        tuple(s.score for s in submissions), tuple(tests),
        tuple((name, line, count) for (name, line), count in common))


def first_line(text: str) -> str:
    """A failure's first line (reasons are one line already; this guards older files)."""
    return text.strip().splitlines()[0] if text.strip() else "(no reason given)"


def histogram(scores: tuple[float, ...], max_score: float, bins: int = 10) -> list[int]:
    """Counts of `scores` in `bins` equal bins of [0, max_score]; a full score is in the last."""
    counts = [0] * bins
    if max_score <= 0:
        return counts
    for score in scores:
        index = int(bins * min(max(score, 0.0), max_score) / max_score)
        counts[min(index, bins - 1)] += 1
    return counts

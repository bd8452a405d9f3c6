"""The mutation report of one assignment: counts, score, survivors with diffs.

Every generated mutant ends in one status:
- `killed`: a graded test failed on it;
- `survived`: every graded test that ran passed — a hole in the suite, or an equivalent mutant
  not yet listed;
- `timed_out`: its session ran past the limit; counted against the score, because a hang the
  suite's own launch timeouts do not turn into a failed test is a session failure in a grade;
- `error`: the session itself failed (no results); counted against the score, rerun it;
- `equivalent`: listed in `solutions/<id>/equivalent_mutants.toml`; not run;
- `stillborn`: does not compile; not run.

score = killed / (total − equivalent − stillborn); the target is `TARGET_SCORE`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from grader.instructor.mutate.equivalents import Equivalent
from grader.instructor.mutate.generate import GENERATOR_VERSION, Mutant
from grader.instructor.mutate.runner import Verdict
from grader.instructor.mutate.summary import Summary
from grader.report.render import format_table

STATUSES = ("killed", "survived", "timed_out", "error", "equivalent", "stillborn")
TARGET_SCORE = 0.90


@dataclass(frozen=True)
class MutantResult:
    """A mutant and what became of it."""

    mutant: Mutant
    status: str  # one of STATUSES
    verdict: Verdict | None = None  # None for equivalent and stillborn mutants (not run)
    note: str = ""  # the equivalence reason

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {', '.join(STATUSES)}")


@dataclass(frozen=True)
class Counts:
    total: int = 0
    killed: int = 0
    survived: int = 0
    timed_out: int = 0
    error: int = 0
    equivalent: int = 0
    stillborn: int = 0

    def __post_init__(self) -> None:
        parts = (self.killed + self.survived + self.timed_out + self.error + self.equivalent
                 + self.stillborn)
        if parts != self.total or min(self.__dict__.values()) < 0:
            raise ValueError(f"mutation counts do not add up: {self}")

    @classmethod
    def of(cls, statuses: list[str]) -> Counts:
        counter = Counter(statuses)
        return cls(total=len(statuses), **{s: counter[s] for s in STATUSES})

    @property
    def graded(self) -> int:
        """The denominator: mutants that can and should be caught."""
        return self.total - self.equivalent - self.stillborn

    @property
    def score(self) -> float | None:
        """killed / (total − equivalent − stillborn); None when nothing is left to catch."""
        return self.killed / self.graded if self.graded else None

    def as_dict(self) -> dict[str, int]:
        return {"total": self.total, **{s: getattr(self, s) for s in STATUSES}}


@dataclass(frozen=True)
class MutationReport:
    """Everything one `python -m grader mutate <id>` run found."""

    assignment: str
    results: tuple[MutantResult, ...]
    sources: dict[str, str]
    solution_sha256: str
    wall_s: float = 0.0
    skipped: int = 0  # generated but left out by --limit
    stale_equivalents: tuple[Equivalent, ...] = field(default=())
    suite_sha256: str = ""  # of the suites that graded the run (summary.suite_hash)
    provided_sha256: str = ""  # of the provided modules it ran with (summary.provided_hash)

    @property
    def counts(self) -> Counts:
        return Counts.of([r.status for r in self.results])

    @property
    def complete(self) -> bool:
        return self.skipped == 0

    def with_status(self, status: str) -> list[MutantResult]:
        return [r for r in self.results if r.status == status]

    def summary(self) -> Summary:
        counts = self.counts
        return Summary(self.assignment, GENERATOR_VERSION, self.solution_sha256, counts.score,
                       counts.as_dict(), tuple(r.mutant.name for r in self.with_status(
                           "survived")), self.wall_s, self.suite_sha256, self.provided_sha256)

    def score_line(self) -> str:
        counts = self.counts
        if counts.score is None:
            return "score: n/a (no mutant left to catch)"
        verdict = "meets" if counts.score >= TARGET_SCORE else "is below"
        return (f"score {100 * counts.score:.1f}% = killed {counts.killed} / "
                f"(total {counts.total} - equivalent {counts.equivalent} - stillborn "
                f"{counts.stillborn}); {verdict} the target of {100 * TARGET_SCORE:.0f}%")

    def table(self) -> str:
        """Per operator: how many mutants of each status (terminal and Markdown)."""
        rows = []
        operators = sorted({r.mutant.operator for r in self.results})
        for operator in operators + ["all"]:
            statuses = [r.status for r in self.results
                        if operator == "all" or r.mutant.operator == operator]
            counts = Counts.of(statuses)
            score = "-" if counts.score is None else f"{100 * counts.score:.0f}%"
            rows.append([operator, counts.total, *(getattr(counts, s) for s in STATUSES),
                         score])
        return format_table(["operator", "total", *STATUSES, "score"], rows)

    def markdown(self) -> str:
        modules = ", ".join(f"`{m}.py`" for m in self.sources)
        lines = [
            f"# Mutation testing: {self.assignment}",
            "",
            f"Generator v{GENERATOR_VERSION} over `solutions/{self.assignment}/` ({modules}, "
            f"sha256 `{self.solution_sha256[:12]}`); wall time {self.wall_s:.0f} s.",
            "",
            f"**{self.score_line()}.**",
        ]
        if not self.complete:
            lines += ["", f"A partial run (`--limit`): {self.skipped} generated mutant(s) were "
                      "not run, so this is no score of the assignment."]
        lines += ["", "```", self.table(), "```"]
        lines += self._survivors() + self._failures() + self._equivalents() + self._killers()
        return "\n".join(lines) + "\n"

    def _survivors(self) -> list[str]:
        survivors = self.with_status("survived")
        lines = ["", f"## Survivors ({len(survivors)})", ""]
        if not survivors:
            return lines + ["None."]
        lines += ["Each one is a wrong implementation the suites give full marks. Kill it with a "
                  "test of the documented contract (fix the docstring first if the contract is "
                  "silent), or list it in `equivalent_mutants.toml` with the reason no test can "
                  "tell it from the solution."]
        for result in survivors:
            lines += self._mutant_block(result)
            ran = result.verdict.tests_run if result.verdict else ()
            lines += ["", f"Tests that ran on it, all passed ({len(ran)}; the others never "
                      "reach the function it changes):", ""]
            lines += [f"- `{nodeid}`" for nodeid in ran] or ["- none: no test calls the "
                                                             "function it changes"]
        return lines

    def _failures(self) -> list[str]:
        failed = self.with_status("timed_out") + self.with_status("error")
        if not failed:
            return []
        lines = ["", f"## Timed out or failed to run ({len(failed)})"]
        for result in failed:
            lines += self._mutant_block(result)
            reason = result.verdict.reason if result.verdict else ""
            lines += ["", f"{result.status.replace('_', ' ')}: {reason or 'no detail'}"]
        return lines

    def _equivalents(self) -> list[str]:
        equivalent = self.with_status("equivalent")
        lines = ["", f"## Equivalent, reviewed ({len(equivalent)})", ""]
        lines += [f"- `{r.mutant.name}` `{r.mutant.one_line(self.sources[r.mutant.module])}`: "
                  f"{r.note}" for r in equivalent] or ["None listed."]
        if self.stale_equivalents:
            lines += ["", "Stale entries of `equivalent_mutants.toml` (no generated mutant has "
                      "their id; delete them or review again):", ""]
            lines += [f"- `{e.mutant_id}` ({e.mutant or '?'}): {e.reason}"
                      for e in self.stale_equivalents]
        return lines

    def _killers(self) -> list[str]:
        killers = Counter(r.verdict.killed_by for r in self.with_status("killed") if r.verdict)
        if not killers:
            return []
        lines = ["", "## Tests that killed first", "", "| test | mutants |", "|---|---:|"]
        lines += [f"| `{nodeid}` | {n} |" for nodeid, n in
                  sorted(killers.items(), key=lambda item: (-item[1], item[0]))]
        return lines

    def _mutant_block(self, result: MutantResult) -> list[str]:
        mutant = result.mutant
        return ["", f"### `{mutant.name}`", "", "```diff",
                mutant.diff(self.sources[mutant.module]).rstrip("\n"), "```"]


def write_markdown(report: MutationReport, out_dir: Path) -> Path:
    """`<out_dir>/mutation/<id>.md`."""
    path = out_dir / "mutation" / f"{report.assignment}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report.markdown(), encoding="utf-8")
    return path

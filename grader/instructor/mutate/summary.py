"""The committed mutation summary: `solutions/<id>/mutation_summary.json`.

A full `python -m grader mutate <id>` writes it: the score, the counts, the survivors' names,
the generator version and a hash of the solution sources it was made from. `grader list` prints
the score; `check_summary` (run by the project's tests) fails when the solution or the generator
changed since, so a score cannot go stale silently — rerun `python -m grader mutate <id>`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.instructor.mutate.generate import GENERATOR_VERSION
from grader.manifest import Assignment

FILE_NAME = "mutation_summary.json"
COUNT_KEYS = ("total", "killed", "survived", "timed_out", "error", "equivalent", "stillborn")


@dataclass(frozen=True)
class Summary:
    """What a full mutation run of one assignment left to commit."""

    assignment: str
    generator_version: int
    solution_sha256: str
    score: float | None  # killed / (total - equivalent - stillborn); None with no mutant
    counts: dict[str, int]
    survivors: tuple[str, ...] = ()
    wall_s: float = 0.0
    suite_sha256: str = ""  # "" in a summary written before suites were hashed
    # of the provided modules the run graded with (`provided_hash`); "" in a summary written
    # before they were hashed, which is not checked against them
    provided_sha256: str = ""

    def __post_init__(self) -> None:
        missing = [k for k in COUNT_KEYS if not isinstance(self.counts.get(k), int)]
        if missing:
            raise ValueError(f"mutation summary of {self.assignment}: counts lack "
                             f"{', '.join(missing)}")
        if self.score is not None and not 0.0 <= self.score <= 1.0:
            raise ValueError(f"mutation summary of {self.assignment}: score {self.score} "
                             "is not in [0, 1]")

    def to_json(self) -> dict[str, Any]:
        return {
            "assignment": self.assignment, "generator_version": self.generator_version,
            "solution_sha256": self.solution_sha256,
            "score": None if self.score is None else round(self.score, 4),
            "counts": {k: self.counts[k] for k in COUNT_KEYS},
            "survivors": list(self.survivors), "wall_s": round(self.wall_s, 1),
            "suite_sha256": self.suite_sha256, "provided_sha256": self.provided_sha256,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Summary:
        try:
            return cls(
                assignment=str(data["assignment"]),
                generator_version=int(data["generator_version"]),
                solution_sha256=str(data["solution_sha256"]),
                score=None if data["score"] is None else float(data["score"]),
                counts={k: int(data["counts"][k]) for k in COUNT_KEYS},
                survivors=tuple(str(s) for s in data.get("survivors", [])),
                wall_s=float(data.get("wall_s", 0.0)),
                suite_sha256=str(data.get("suite_sha256", "")),
                provided_sha256=str(data.get("provided_sha256", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"mutation summary is malformed: {exc!r}") from exc


def summary_path(assignment_id: str, root: Path) -> Path:
    return root / "solutions" / assignment_id / FILE_NAME


def _modules_hash(folder: Path, modules: tuple[str, ...]) -> str:
    """sha256 over `folder/<module>.py` for each module, names and bytes, in order."""
    digest = hashlib.sha256()
    for module in modules:
        path = folder / f"{module}.py"
        digest.update(f"{module}.py\0".encode())
        digest.update(path.read_bytes() if path.is_file() else b"<missing>")
        digest.update(b"\0")
    return digest.hexdigest()


def source_hash(assignment: Assignment, root: Path) -> str:
    """sha256 over the solution modules the manifest lists, names and bytes, in order."""
    return _modules_hash(root / "solutions" / assignment.id, assignment.modules)


def suite_hash(assignment: Assignment, root: Path, suites: Path | None = None) -> str:
    """sha256 over the tests that grade the assignment: `assignments/<id>/test_public.py` and
    every `.py` file of its hidden suite folder, relative names and bytes, in name order."""
    from grader.session.runner import hidden_root

    digest = hashlib.sha256()
    public = root / "assignments" / assignment.id / "test_public.py"
    hidden = hidden_root(root, suites) / assignment.id
    files = [("test_public.py", public)] if public.is_file() else []
    if hidden.is_dir():
        files += sorted((f"suite/{p.relative_to(hidden).as_posix()}", p)
                        for p in hidden.rglob("*.py") if "__pycache__" not in p.parts)
    for name, path in files:
        digest.update(f"{name}\0".encode())
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def provided_hash(assignment: Assignment, root: Path) -> str:
    """sha256 over the provided modules (`assignments/<id>/<name>.py` for the manifest's
    `provided`), names and bytes, in order: code every mutant runs with, so a change to it may
    change which mutants the suites catch."""
    return _modules_hash(root / "assignments" / assignment.id, assignment.provided)


def suite_staleness(assignment: Assignment, root: Path) -> str:
    """Why the committed score may no longer describe the suites or the provided modules they
    grade with ("" when it does, or when there is no summary): a warning, since the score only
    moves when a rerun says so."""
    summary = load_summary(assignment.id, root)
    if summary is None:
        return ""
    rerun = f"rerun `python -m grader mutate {assignment.id}`"
    if not summary.suite_sha256:
        return f"stale: the summary records no suite hash; {rerun}"
    if summary.suite_sha256 != suite_hash(assignment, root):
        return f"stale: the suites changed since the mutation run; {rerun}"
    if summary.provided_sha256 and summary.provided_sha256 != provided_hash(assignment, root):
        return f"stale: the provided modules changed since the mutation run; {rerun}"
    return ""


def write_summary(summary: Summary, root: Path) -> Path:
    path = summary_path(summary.assignment, root)
    path.write_text(json.dumps(summary.to_json(), indent=2) + "\n", encoding="utf-8")
    return path


def load_summary(assignment_id: str, root: Path) -> Summary | None:
    """The committed summary, or None when the assignment has none yet."""
    path = summary_path(assignment_id, root)
    if not path.is_file():
        return None
    try:
        return Summary.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from exc


def check_summary(assignment: Assignment, root: Path) -> list[str]:
    """Why the committed summary no longer describes the solution (empty: it does, or none)."""
    summary = load_summary(assignment.id, root)
    if summary is None:
        return []
    where = summary_path(assignment.id, root)
    rerun = f"rerun `python -m grader mutate {assignment.id}` and commit {where.name}"
    problems = []
    if summary.assignment != assignment.id:
        problems.append(f"{where}: made for {summary.assignment!r}, not {assignment.id!r}")
    if summary.solution_sha256 != source_hash(assignment, root):
        problems.append(f"{where}: the solution changed since the mutation run; {rerun}")
    if summary.generator_version != GENERATOR_VERSION:
        problems.append(f"{where}: made by generator v{summary.generator_version}, this is "
                        f"v{GENERATOR_VERSION}; {rerun}")
    return problems


def score_text(assignment: Assignment, root: Path) -> str:
    """The committed score for `grader list`: `93.5% (187/200)`, `-` without a summary."""
    try:
        summary = load_summary(assignment.id, root)
    except ValueError:
        return "unreadable"
    if summary is None:
        return "-"
    counts = summary.counts
    graded = counts["total"] - counts["equivalent"] - counts["stillborn"]
    text = "n/a" if summary.score is None else \
        f"{100 * summary.score:.1f}% ({counts['killed']}/{graded})"
    return text + (" stale" if check_summary(assignment, root) else "")

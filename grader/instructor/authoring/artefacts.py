"""The artefacts of one assignment: what `grader new` writes and `grader doctor` looks for.

Every path is derived from the assignment's manifest entry (`assignments/course.toml`) and a
course root, never from a list of assignments: a new `[[assignment]]` table is all it takes
for the tools to know what the assignment must hold. `ARTEFACTS` is the file table of
docs/authoring.md as data, one `Artefact` per kind, in the order an author meets them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grader.manifest import Assignment

# What `grader new` leaves in every file it writes, and `grader doctor` reports until removed.
TODO_MARKER = "TODO(grader new)"
MIN_MUTANTS = 8


@dataclass(frozen=True)
class Artefact:
    """One kind of file (or folder) every assignment has.

    `paths(assignment)` are its paths relative to the course root; `folder` marks a kind whose
    paths are folders (present when they exist and hold something), `needs_worksheet` one that
    only assignments with `worksheet_points` have.
    """

    kind: str
    what: str
    paths: Callable[[Assignment], tuple[str, ...]]
    folder: bool = False
    needs_worksheet: bool = False

    def applies(self, assignment: Assignment) -> bool:
        return assignment.worksheet_points > 0 or not self.needs_worksheet


def _stubs(a: Assignment) -> tuple[str, ...]:
    return (f"assignments/{a.id}/__init__.py",
            *(f"assignments/{a.id}/{m}.py" for m in a.modules))


def _provided(a: Assignment) -> tuple[str, ...]:
    return tuple(f"assignments/{a.id}/{m}.py" for m in a.provided)


def _solution(a: Assignment) -> tuple[str, ...]:
    return (f"solutions/{a.id}/__init__.py", *(f"solutions/{a.id}/{m}.py" for m in a.modules))


def _independent(a: Assignment) -> tuple[str, ...]:
    return tuple(f"grader/tests/independent/{a.id}/{m}.py" for m in a.modules)


ARTEFACTS: tuple[Artefact, ...] = (
    Artefact("readme", "the textbook", lambda a: (f"assignments/{a.id}/README.md",)),
    Artefact("stub", "the modules students edit (manifest `modules`)", _stubs),
    Artefact("provided", "read-only helpers (manifest `provided`)", _provided),
    Artefact("public_tests", "public tests", lambda a: (f"assignments/{a.id}/test_public.py",)),
    Artefact("suite", "hidden suite package with test_*.py",
             lambda a: (f"grader/suites/{a.id}/__init__.py",)),
    Artefact("solution", "reference implementation", _solution),
    Artefact("mutants", f"at least {MIN_MUTANTS} hand-written mutants",
             lambda a: (f"solutions/{a.id}/mutants/__init__.py",)),
    Artefact("equivalents", "reviewed equivalent generated mutants",
             lambda a: (f"solutions/{a.id}/equivalent_mutants.toml",)),
    Artefact("mutation_summary", "run `python -m grader mutate <id>` and commit it",
             lambda a: (f"solutions/{a.id}/mutation_summary.json",)),
    Artefact("worksheet_source", "nbgrader worksheet source",
             lambda a: (f"solutions/{a.id}/worksheet.ipynb",), needs_worksheet=True),
    Artefact("worksheet_release", "run `python -m grader worksheets release <id>`",
             lambda a: (f"assignments/{a.id}/worksheet.ipynb",), needs_worksheet=True),
    Artefact("bench", "`grader bench <id>`: def main(argv)",
             lambda a: (f"grader/bench/{a.id}.py",)),
    Artefact("independent", "independent correct implementation", _independent),
)

KINDS = tuple(a.kind for a in ARTEFACTS)


def artefact(kind: str) -> Artefact:
    """The artefact of this kind; `KeyError` naming the kinds otherwise."""
    for item in ARTEFACTS:
        if item.kind == kind:
            return item
    raise KeyError(f"no artefact kind {kind!r}; known: {', '.join(KINDS)}")


def files_of(assignment: Assignment, root: Path) -> list[Path]:
    """Every file of the assignment that exists: its artefacts plus the files in its own
    folders (suite, mutants, independent implementation), for the TODO scan."""
    found: set[Path] = set()
    for item in ARTEFACTS:
        if item.applies(assignment):
            found.update(root / p for p in item.paths(assignment) if (root / p).is_file())
    for folder in (f"assignments/{assignment.id}", f"solutions/{assignment.id}",
                   f"grader/suites/{assignment.id}",
                   f"grader/tests/independent/{assignment.id}"):
        if (root / folder).is_dir():
            found.update(p for p in (root / folder).rglob("*") if p.is_file()
                         and "__pycache__" not in p.parts)
    return sorted(found)

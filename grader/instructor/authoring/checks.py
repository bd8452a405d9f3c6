"""The checks of `grader doctor`: is one assignment complete and consistent?

Each check is a function `(assignment, course, root) -> list[Finding]` in `CHECKS`, named by
the row it fills in doctor's table. All of them read files (and parse Python with `ast`, TOML
and notebooks as JSON): none imports the code under test or starts a grading session, so the
whole course is checked in seconds. What needs a session (points, the stub scoring zero,
mutants caught) is `grader selfcheck`'s job.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grader.instructor.authoring.artefacts import (
    ARTEFACTS,
    MIN_MUTANTS,
    TODO_MARKER,
    files_of,
)
from grader.manifest import Assignment, Course

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ERROR, WARN = "error", "warn"


@dataclass(frozen=True)
class Finding:
    """One thing doctor reports: `error` fails the run, `warn` is shown only."""

    level: str
    message: str


Check = Callable[[Assignment, Course, Path], list[Finding]]

# Sections every README has (docs: ../shared/ASSIGNMENT.md, item 2): (what, pattern). A pattern
# is searched in the whole text (case-insensitive) or, starting with `^#`, in its headings.
README_SECTIONS = (
    ("calculate before you code", r"calculate before you code|numbers first"),
    ("grading table", r"^#+ .*grading"),
    ("cost budget", r"cost budget"),
    ("pitfalls", r"^#+ .*pitfalls"),
    ("running the tests and the benchmark", r"^#+ .*running"),
    ("**Tolerances** paragraph", r"\*\*tolerances\*\*"),
)
# Asked for too, but older READMEs lack them: reported as warnings.
README_ADVISED = (
    ("API", r"\bAPI\b"),
    ("further reading", r"further reading"),
)


def _error(message: str) -> Finding:
    return Finding(ERROR, message)


def _warn(message: str) -> Finding:
    return Finding(WARN, message)


def check_artefacts(assignment: Assignment, course: Course, root: Path) -> list[Finding]:
    """Every file of docs/authoring.md's table exists."""
    found = []
    for item in ARTEFACTS:
        if not item.applies(assignment):
            continue
        for path in item.paths(assignment):
            if not (root / path).is_file():
                what = item.what.replace("<id>", assignment.id)
                found.append(_error(f"{item.kind}: {path} is missing ({what})"))
    if assignment.worksheet_points == 0:
        found.append(_warn("the manifest gives no worksheet_points: every assignment has a "
                           "10-point worksheet (../shared/ASSIGNMENT.md, item 8)"))
    return found


def check_readme(assignment: Assignment, course: Course, root: Path) -> list[Finding]:
    """The README has every section of ../shared/ASSIGNMENT.md, item 2."""
    path = root / "assignments" / assignment.id / "README.md"
    if not path.is_file():
        return []  # reported by check_artefacts
    text = path.read_text(encoding="utf-8")
    headings = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    found = []
    for level, sections in ((ERROR, README_SECTIONS), (WARN, README_ADVISED)):
        for what, pattern in sections:
            where = headings if pattern.startswith("^#") else text
            flags = re.IGNORECASE | re.MULTILINE if what != "API" else re.MULTILINE
            if not re.search(pattern, where, flags):
                found.append(Finding(level, f"README.md has no {what} section"))
    if assignment.worksheet_points and "worksheet.ipynb" not in text:
        found.append(_warn("README.md's grading table does not give the worksheet's path "
                           f"(assignments/{assignment.id}/worksheet.ipynb)"))
    return found


def check_suite(assignment: Assignment, course: Course, root: Path) -> list[Finding]:
    """The hidden suite has test modules and no conftest.py (the grader runs --noconftest)."""
    folder = root / "grader" / "suites" / assignment.id
    if not folder.is_dir():
        return []
    found = []
    if not any(folder.rglob("test_*.py")):
        found.append(_error(f"grader/suites/{assignment.id}/ has no test_*.py"))
    if any(folder.rglob("conftest.py")):
        found.append(_error(f"grader/suites/{assignment.id}/ has a conftest.py, which the "
                            "grader never loads (--noconftest): move its fixtures to a module"))
    return found


def check_mutants(assignment: Assignment, course: Course, root: Path) -> list[Finding]:
    """At least MIN_MUTANTS mutants, each with its FEEDBACK; equivalents parse."""
    folder = root / "solutions" / assignment.id / "mutants"
    found = []
    if folder.is_dir():
        mutants = sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))
        if len(mutants) < MIN_MUTANTS:
            found.append(_error(f"solutions/{assignment.id}/mutants/ holds {len(mutants)} "
                                f"mutant(s); at least {MIN_MUTANTS}"))
        for path in mutants:
            names = _top_level_names(path)
            if names is None:
                found.append(_error(f"{_rel(path, root)} does not parse"))
            elif "FEEDBACK" not in names:
                found.append(_error(f"{_rel(path, root)} has no FEEDBACK: say what a student "
                                    "with this bug must be told"))
    equivalents = root / "solutions" / assignment.id / "equivalent_mutants.toml"
    if equivalents.is_file():
        try:
            tomllib.loads(equivalents.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            found.append(_error(f"{_rel(equivalents, root)} is not valid TOML: {exc}"))
    return found


def check_mutation_summary(assignment: Assignment, course: Course, root: Path) -> list[Finding]:
    """The committed mutation score describes this solution (error) and these suites (warn)."""
    from grader.instructor.mutate.summary import check_summary, suite_staleness

    try:
        problems = check_summary(assignment, root)
        stale = suite_staleness(assignment, root)
    except ValueError as exc:
        return [_error(str(exc))]
    return [_error(p) for p in problems] + ([_warn(stale)] if stale else [])


def check_worksheet(assignment: Assignment, course: Course, root: Path) -> list[Finding]:
    """Points and shape of the source, nothing leaked, the student version current."""
    if not assignment.worksheet_points:
        return []
    from grader.instructor.authoring.notebooks import stale_release
    from grader.instructor.worksheets import static_breaches
    from grader.worksheets.nbgrade import WorksheetError

    source = root / "solutions" / assignment.id / "worksheet.ipynb"
    release = root / "assignments" / assignment.id / "worksheet.ipynb"
    if not source.is_file():
        return []
    try:
        found = [_error(b) for b in static_breaches(assignment, source, release, root)
                 if "is missing" not in b]
        if release.is_file():
            found += [_error(b) for b in stale_release(source, release, assignment.id)]
    except WorksheetError as exc:
        found = [_error(str(exc))]
    return found


def check_bench(assignment: Assignment, course: Course, root: Path) -> list[Finding]:
    """`grader/bench/<id>.py` defines `main(argv)` at module level."""
    path = root / "grader" / "bench" / f"{assignment.id}.py"
    if not path.is_file():
        return []
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except SyntaxError as exc:
        return [_error(f"{_rel(path, root)} does not parse: line {exc.lineno}: {exc.msg}")]
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "main":
            if len(node.args.args) == 1:
                return []
            return [_error(f"{_rel(path, root)}: main takes {len(node.args.args)} "
                           "positional arguments; `def main(argv: list[str]) -> int`")]
    return [_error(f"{_rel(path, root)} defines no `def main(argv: list[str]) -> int`")]


def check_signatures(assignment: Assignment, course: Course, root: Path) -> list[Finding]:
    """The stub and the solution expose the same API; the independent implementation has all
    of the stub's (type hints aside: it may be written without them), except the opt-in
    parameters (trailing, with defaults) of an optional part its NOT_ATTEMPTED leaves out."""
    from grader.instructor.judges import not_attempted
    from grader.instructor.signatures import compare_files, missing_from

    optional_extras = bool(not_attempted(root, assignment.id))

    found = []
    for module in assignment.modules:
        stub = root / "assignments" / assignment.id / f"{module}.py"
        solution = root / "solutions" / assignment.id / f"{module}.py"
        independent = root / "grader" / "tests" / "independent" / assignment.id / f"{module}.py"
        if stub.is_file() and solution.is_file():
            found += [_error(f"{module}.py: {d}") for d in compare_files(stub, solution)]
        if stub.is_file() and independent.is_file():
            found += [_error(f"{module}.py: {d}".replace("solution", "independent "
                                                          "implementation"))
                      for d in missing_from(stub, independent, optional_extras)]
    return found


def check_course_map(assignment: Assignment, course: Course, root: Path) -> list[Finding]:
    """README.md's course map is `grader coursemap`'s, with this assignment in it."""
    from grader.cli import coursemap_markdown

    readme = root / "README.md"
    start, end = "<!-- coursemap:start -->", "<!-- coursemap:end -->"
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    if start not in text or end not in text:
        return [_error("README.md has no course map (coursemap markers)")]
    current = text[text.index(start) + len(start):text.index(end)].strip()
    if current != coursemap_markdown(course).strip():
        return [_error("README.md's course map is out of date; paste the output of "
                       "`python -m grader coursemap` between the coursemap markers")]
    return []


def check_todos(assignment: Assignment, course: Course, root: Path) -> list[Finding]:
    """No TODO left by `grader new` in any file of the assignment, nor in its manifest entry."""
    found = [_error(f"TODO assignments/course.toml:{number}: {_note(line)}")
             for number, line in manifest_entry_lines(assignment, root) if TODO_MARKER in line]
    for path in files_of(assignment, root):
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(lines, start=1):
            if TODO_MARKER in line:
                found.append(_error(f"TODO {_rel(path, root)}:{number}: {_note(line)}"))
    return found


def check_contract(assignment: Assignment, course: Course, root: Path) -> list[Finding]:
    """The released contract has not changed without a dated changelog entry."""
    from grader.instructor.authoring.fingerprint import contract_findings

    return [Finding(level, message) for level, message in contract_findings(assignment, root)]


CHECKS: tuple[tuple[str, Check], ...] = (
    ("artefacts", check_artefacts),
    ("readme", check_readme),
    ("suite", check_suite),
    ("mutants", check_mutants),
    ("mutation summary", check_mutation_summary),
    ("worksheet", check_worksheet),
    ("bench", check_bench),
    ("signatures", check_signatures),
    ("course map", check_course_map),
    ("contract", check_contract),
    ("todo", check_todos),
)


def _note(line: str) -> str:
    note = re.sub(r'(\\n)?",?\s*$', "", line.split(TODO_MARKER, 1)[1])  # a notebook's JSON
    return note.strip(" :-\"'<>!").strip()[:90]


def manifest_entry_lines(assignment: Assignment, root: Path) -> list[tuple[int, str]]:
    """(line number, line) of the assignment's `[[assignment]]` table in course.toml."""
    path = root / "assignments" / "course.toml"
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    starts = [i for i, line in enumerate(lines) if line.strip() == "[[assignment]]"]
    own = re.compile(rf"^id\s*=\s*[\"']{re.escape(assignment.id)}[\"']\s*(#.*)?$")
    for begin, end in zip(starts, starts[1:] + [len(lines)]):
        if any(own.match(line.strip()) for line in lines[begin:end]):
            return [(i + 1, lines[i]) for i in range(begin, end)]
    return []


def _top_level_names(path: Path) -> set[str] | None:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except SyntaxError:
        return None
    names: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)

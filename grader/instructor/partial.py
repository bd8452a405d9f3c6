"""Partial credit and feedback, proven by selfcheck.

Partial credit: for every public function (or class) of an assignment's editable modules, the
solution with only that one stubbed out must lose exactly the points of the tests that declare
they exercise it (`@pytest.mark.exercises("name", ...)`) or one of its dependants — the public
names whose solution code reaches it through its calls — and no other point. The stubbed
variants are graded in the assignment's one selfcheck session, beside the solution, the stub and
the mutants (grader/session/plugin.py grades several implementations per session).

Feedback: every hand-written mutant states what a student with that bug must be told, as a
module constant `FEEDBACK = "phrase"` (or a tuple of keywords, each of which must appear); the
first line of the first test that catches it must contain it (case-insensitive).
"""

from __future__ import annotations

import ast
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from grader.manifest import Assignment
from grader.report.results import RunResult
from grader.session.reasons import HIDDEN

STUB_MESSAGE = "{name}: stubbed by selfcheck's partial-credit check"


def public_names(stub: Path) -> list[str]:
    """Top-level functions and classes of a stub module that students implement, in order."""
    tree = ast.parse(stub.read_text(encoding="utf-8"))
    return [node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and not node.name.startswith("_")]


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _stub_body(node: ast.FunctionDef | ast.AsyncFunctionDef, message: str) -> None:
    first = node.body[0]
    docstring = (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                 and isinstance(first.value.value, str))
    raised = ast.parse(f"raise NotImplementedError({message!r})").body[0]
    node.body = [first, raised] if docstring else [raised]


def stubbed_source(source: str, name: str, message: str | None = None) -> str:
    """`source` with the body of `name` replaced by `raise NotImplementedError(message)`
    (default `STUB_MESSAGE`), docstrings kept: a top-level function's body, every method of a
    class (so neither building nor using it works), or for `Class.method` that one method.

    The one owner of "stub one public name" (selfcheck's partial-credit variants,
    `grader/tests/stub_one.py`). Raises ValueError when `source` defines no such name."""
    tree = ast.parse(source)
    text = STUB_MESSAGE.format(name=name) if message is None else message
    owner, _, member = name.rpartition(".")
    found = False
    for node in tree.body:
        if owner:
            if isinstance(node, ast.ClassDef) and node.name == owner:
                for item in node.body:
                    if isinstance(item, _FUNCTIONS) and item.name == member:
                        _stub_body(item, text)
                        found = True
        elif isinstance(node, _FUNCTIONS) and node.name == name:
            _stub_body(node, text)
            found = True
        elif isinstance(node, ast.ClassDef) and node.name == name:
            for item in node.body:
                if isinstance(item, _FUNCTIONS):
                    _stub_body(item, text)
            found = True
    if not found:
        what = "method" if owner else "top-level function or class"
        raise ValueError(f"no {what} {name!r} to stub")
    return ast.unparse(tree) + "\n"


def _references(node: ast.AST) -> set[str]:
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    return names


def dependants(sources: dict[str, str], name: str) -> set[str]:
    """Public names whose solution code reaches `name` through calls, across the modules:
    stubbing `name` may fail their tests too (the closure over every top-level definition,
    private helpers included)."""
    definitions: dict[str, ast.AST] = {}
    for source in sources.values():
        for node in ast.parse(source).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                definitions[node.name] = node
    uses = {d: _references(node) & set(definitions) - {d} for d, node in definitions.items()}
    reached: dict[str, set[str]] = {}
    for start in definitions:
        seen, todo = set(), [start]
        while todo:
            for used in uses[todo.pop()]:
                if used not in seen:
                    seen.add(used)
                    todo.append(used)
        reached[start] = seen
    return {d for d, seen in reached.items() if name in seen and not d.startswith("_")}


@dataclass
class Variants:
    """Folders laid out like assignments/, one per public name, each with only it stubbed."""

    assignment: Assignment
    folder: Path
    names: list[str] = field(default_factory=list)
    dependants: dict[str, set[str]] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)  # public name -> its module

    def path(self, name: str) -> Path:
        return self.folder / name

    def cleanup(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def make_variants(assignment: Assignment, root: Path) -> Variants:
    """Write the stubbed variants of an assignment's solution into a fresh temp folder."""
    solution_dir = root / "solutions" / assignment.id
    stub_dir = root / "assignments" / assignment.id
    folder = Path(tempfile.mkdtemp(prefix=f"mlsys-partial-{assignment.id}-"))
    variants = Variants(assignment, folder)
    if not all((d / f"{m}.py").is_file() for d in (solution_dir, stub_dir)
               for m in assignment.modules):
        return variants  # a missing module is the signature check's breach, not ours
    sources = {m: (solution_dir / f"{m}.py").read_text(encoding="utf-8")
               for m in assignment.modules}
    for module in assignment.modules:
        for name in public_names(stub_dir / f"{module}.py"):
            target = variants.path(name) / assignment.id
            target.mkdir(parents=True)
            for other, source in sources.items():
                text = stubbed_source(source, name) if other == module else source
                (target / f"{other}.py").write_text(text, encoding="utf-8")
            variants.names.append(name)
            variants.modules[name] = module
            variants.dependants[name] = dependants(sources, name)
    return variants


@dataclass
class PartialRow:
    """One public name: what its tests are worth and what stubbing it cost."""

    name: str
    declared: int  # points of the tests that exercise it
    allowed: int  # ... plus those of its dependants
    lost: int
    breaches: list[str]


def judge_partial(name: str, run: RunResult | None, solution: RunResult | None,
                  dependants_of: set[str]) -> PartialRow:
    """The row of `name`: the stubbed variant must lose the points of the tests declaring it
    (every one of them must fail), may lose those of its dependants, and nothing else."""
    if run is None or solution is None:
        return PartialRow(name, 0, 0, 0, [f"{name}: no results for the variant with it stubbed"])
    passed = {t.nodeid for t in solution.tests if t.passed}
    by_id = {t.nodeid: t for t in run.tests}
    breaches = []
    declared = allowed = lost = 0
    for test in solution.tests:
        if test.nodeid not in passed or test.not_graded_here:
            continue
        mine = by_id.get(test.nodeid)
        failed = mine is not None and not mine.passed
        exercises = set(test.exercises)
        own = name in exercises
        related = own or bool(exercises & dependants_of)
        declared += test.points if own else 0
        allowed += test.points if related else 0
        lost += test.points if failed else 0
        if own and not failed:
            breaches.append(f"{test.nodeid} declares it exercises {name}, yet passes with "
                            f"{name} stubbed: it tests something else")
        if failed and not related:
            reason = mine.feedback if mine is not None else ""
            breaches.append(f"{test.nodeid} loses {test.points} point(s) when only {name} is "
                            f"a stub, though it exercises {sorted(exercises) or 'nothing'}: "
                            f"{reason}")
    return PartialRow(name, declared, allowed, lost, breaches)


def undeclared(solution: RunResult) -> list[str]:
    """Graded tests that declare no exercised name (every test must say what it calls)."""
    return [f"{t.nodeid} declares nothing: add @pytest.mark.exercises(...) with the public "
            f"names it calls" for t in solution.tests if not t.exercises and t.points
            and t.name != "screen"]


def expected_feedback(mutant: Path) -> tuple[str, ...]:
    """The mutant's `FEEDBACK` (a phrase, or a tuple of keywords), read with ast; () if none."""
    tree = ast.parse(mutant.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "FEEDBACK"
                                                for t in node.targets):
            value = ast.literal_eval(node.value)
            return (value,) if isinstance(value, str) else tuple(str(v) for v in value)
    return ()


def mostly_hidden(said: str) -> bool:
    """Whether a reason is mostly blanked by the scrub (grader/session/reasons.py): it starts with
    `<hidden>`, or a third or more of its words are `<hidden>` — the suite's own words were
    taken for data, and the student learns nothing."""
    text = said.strip()
    blanked = text.count(HIDDEN)
    words = len(re.findall(r"[A-Za-z]{2,}", text.replace(HIDDEN, " ")))
    return text.startswith(HIDDEN) or (blanked > 0 and 3 * blanked >= blanked + words)


def feedback_breach(name: str, wanted: tuple[str, ...], said: str) -> str:
    """"" when the first failing test's first line contains every wanted phrase and is not
    mostly `<hidden>` (`mostly_hidden`)."""
    if said and mostly_hidden(said):
        return (f"mutant {name}: the first failing test says {said!r}, mostly blanked by the "
                f"scrub: declare the hint (hint=, a hint-like name; grader/session/reasons.py)")
    if not wanted:
        return (f"mutant {name} states no FEEDBACK: say what a student with this bug must be "
                f"told (FEEDBACK = \"...\" in solutions/<id>/mutants/{name}.py)")
    missing = [w for w in wanted if w.lower() not in said.lower()]
    if not missing:
        return ""
    return (f"mutant {name}: the first failing test says {said!r}; a student with this bug "
            f"must be told {' / '.join(repr(w) for w in missing)}")

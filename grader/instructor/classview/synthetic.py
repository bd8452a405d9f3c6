"""A synthetic class from the course's own implementations, for tests and the benchmark.

Nothing here grades anything: each student's results.json is written in the schema from what is
known of the implementation (a solution or an independent implementation passes every test, a
stub fails every test with "not implemented", a mutant fails the test whose source names its
`FEEDBACK`), and the submitted modules are the implementation's own files. `renamed_copy`
makes a planted copy: every name the module defines renamed, top-level definitions reordered.
"""

from __future__ import annotations

import ast
import builtins
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from grader.manifest import REPO_ROOT, Course
from grader.report.gradescope import gradescope_json
from grader.report.results import NOT_IMPLEMENTED, RunResult, TestResult


@dataclass(frozen=True)
class SuiteTest:
    """A grading test as declared: its name, visibility, points, and its function's source."""

    name: str
    visibility: str
    points: int
    source: str
    module_text: str = ""  # the whole test file, its hint constants included


def declared_tests(assignment_id: str, root: Path = REPO_ROOT) -> list[SuiteTest]:
    """The test functions of the public tests and hidden suites, with `@pytest.mark.points`."""
    files = [(root / "assignments" / assignment_id / "test_public.py", "public")]
    files += [(p, "hidden") for p in sorted((root / "grader" / "suites" / assignment_id)
                                          .glob("test_*.py"))]
    found = []
    for path, visibility in files:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) \
                    and node.name.startswith("test_"):
                points = _points(node)
                if points:
                    found.append(SuiteTest(node.name, visibility, points,
                                           ast.get_source_segment(text, node) or "", text))
    return found


def _points(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    for decorator in node.decorator_list:
        if isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith(
                "mark.points") and decorator.args:
            value = decorator.args[0]
            if isinstance(value, ast.Constant) and isinstance(value.value, int):
                return value.value
    return 0


@dataclass(frozen=True)
class Mutant:
    """A hand-written mutant: its name, the module it replaces, its text, and its promise."""

    name: str
    module: str
    text: str
    feedback: tuple[str, ...]


def mutants(assignment_id: str, root: Path = REPO_ROOT) -> list[Mutant]:
    """The mutants of `solutions/<id>/mutants/` as source: the solution module with the
    mutant's replacements applied (what `harness.mutation.mutate` executes)."""
    found = []
    for path in sorted((root / "solutions" / assignment_id / "mutants").glob("*.py")):
        if path.name.startswith("_"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        values: dict[str, object] = {}
        replace: list[tuple[str, str]] = []
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Name):
                try:
                    values[node.targets[0].id] = ast.literal_eval(node.value)
                except ValueError:
                    pass
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                for keyword in node.value.keywords:
                    if keyword.arg == "replace":
                        replace = ast.literal_eval(keyword.value)
        module = str(values.get("MUTATES", ""))
        solution = root / "solutions" / assignment_id / f"{module}.py"
        if not module or not solution.is_file():
            continue
        text = solution.read_text(encoding="utf-8")
        for old, new in replace:
            text = text.replace(old, new, 1)
        feedback = values.get("FEEDBACK", ())
        words = (feedback,) if isinstance(feedback, str) else tuple(map(str, feedback))  # type: ignore[call-overload]
        found.append(Mutant(path.stem, module, text, words))
    return found


def caught_by(mutant: Mutant, tests: list[SuiteTest]) -> SuiteTest:
    """The test a mutant is taken to fail: the first whose source names its FEEDBACK words,
    else the first of the first test file that names them (in a hint constant), else the
    first hidden test."""
    def names(text: str) -> bool:
        return all(word.lower() in text.lower() for word in mutant.feedback)

    return (next((t for t in tests if names(t.source)), None)
            or next((t for t in tests if names(t.module_text)), None)
            or next((t for t in tests if t.visibility == "hidden"), tests[0]))


def renamed_copy(text: str, seed: int = 0) -> str:
    """`text` with every name it defines renamed and its top-level functions and classes
    reordered (docstrings and comments dropped): what a copier does to hide a copy."""
    tree = ast.parse(text)
    defined: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
    defined -= set(dir(builtins)) | {"self", "cls"}
    rng = random.Random(seed)
    names = {name: f"{rng.choice(['val', 'tmp', 'my', 'obj', 'thing'])}_{i}"
             for i, name in enumerate(sorted(defined))}

    class Renamer(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.Name:
            node.id = names.get(node.id, node.id)
            return node

        def visit_arg(self, node: ast.arg) -> ast.arg:
            node.arg = names.get(node.arg, node.arg)
            return node

        def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
            self.generic_visit(node)
            node.attr = names.get(node.attr, node.attr)
            return node

        def visit_keyword(self, node: ast.keyword) -> ast.AST:
            self.generic_visit(node)
            if node.arg is not None:
                node.arg = names.get(node.arg, node.arg)
            return node

        def _definition(self, node: ast.AST) -> ast.AST:
            self.generic_visit(node)
            node.name = names.get(node.name, node.name)  # type: ignore[attr-defined]
            body = node.body  # type: ignore[attr-defined]
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
            return node

        visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _definition

    tree = Renamer().visit(tree)
    head = [n for n in tree.body if not isinstance(n, ast.FunctionDef | ast.ClassDef)]
    moved = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)]
    rng.shuffle(moved)
    tree.body = head + moved[::-1]
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def results_document(course: Course, outcomes: dict[str, list[TestResult]],
                     impl: str) -> dict:
    """A results.json document (the schema's, via `gradescope_json`) of the given tests."""
    tests = tuple(t for a in course.ids for t in outcomes.get(a, []))
    return gradescope_json(RunResult(impl, tests), course.ids,
                           {"name": course.name, "version": course.version})


def outcome(assignment_id: str, test: SuiteTest, failed: str | None = None,
            not_implemented: bool = False) -> TestResult:
    """A TestResult of `test`: passed, or failed with reason `failed`."""
    return TestResult(
        nodeid=f"{assignment_id}::{test.name}", name=test.name, assignment=assignment_id,
        visibility=test.visibility, points=test.points,
        outcome="passed" if failed is None else "failed",
        reason=failed or "", not_implemented=not_implemented)


@dataclass
class Plan:
    """What the synthetic class was built to show."""

    copies: list[tuple[str, str, str]] = field(default_factory=list)  # (assignment, a, b)
    independent: list[tuple[str, str, str]] = field(default_factory=list)
    mutant_failures: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    # student -> (assignment, test, reason's expected words)


def write_submission(folder: Path, course: Course, outcomes: dict[str, list[TestResult]],
                     code: dict[str, dict[str, str]], impl: str) -> None:
    """folder/results.json and folder/assignments/<id>/<module>.py."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(
        json.dumps(results_document(course, outcomes, impl), indent=1), encoding="utf-8")
    for assignment_id, modules in code.items():
        target = folder / "assignments" / assignment_id
        target.mkdir(parents=True, exist_ok=True)
        for name, text in modules.items():
            (target / f"{name}.py").write_text(text, encoding="utf-8")


def build_class(out: Path, course: Course, root: Path = REPO_ROOT,
                ids: tuple[str, ...] = ("ring_allreduce", "ddp")) -> Plan:
    """The synthetic class of `ids` under `out/<student>/run-1/`; see the module docstring.

    Per assignment: the solution, the independent implementation (grader/tests/independent/),
    two students with the untouched stub, a planted copy of the independent implementation, and
    one student per mutant. Mutants hand in results only: a mutant is the solution with one
    change, so its code is — rightly — a copy of the solution's.
    """
    plan = Plan()
    for number, assignment_id in enumerate(ids):
        assignment = course.get(assignment_id)
        tests = declared_tests(assignment_id, root)
        passing = [outcome(assignment_id, t) for t in tests]
        stub_fails = [outcome(assignment_id, t, f"{NOT_IMPLEMENTED}: {t.name}", True)
                      for t in tests]

        def modules_of(folder: Path) -> dict[str, str]:
            return {m: (folder / f"{m}.py").read_text(encoding="utf-8")
                    for m in assignment.modules}  # noqa: B023 (used within the iteration)

        solution = modules_of(root / "solutions" / assignment_id)
        independent = modules_of(root / "grader" / "tests" / "independent" / assignment_id)
        stub = modules_of(root / "assignments" / assignment_id)
        copy = {m: renamed_copy(text, seed=number) for m, text in independent.items()}
        tag = assignment_id.replace("_", "-")
        people = {
            f"{tag}-solution": (passing, solution),
            f"{tag}-independent": (passing, independent),
            f"{tag}-copier": (passing, copy),
            f"{tag}-stub-a": (stub_fails, stub),
            f"{tag}-stub-b": (stub_fails, stub),
        }
        for student, (results, code) in people.items():
            write_submission(out / student / "run-1", course, {assignment_id: results},
                             {assignment_id: code}, student)
        plan.copies.append((assignment_id, f"{tag}-copier", f"{tag}-independent"))
        plan.independent.append((assignment_id, f"{tag}-independent", f"{tag}-solution"))
        for mutant in mutants(assignment_id, root):
            test = caught_by(mutant, tests)
            reason = f"{' '.join(mutant.feedback)} (synthetic failure of mutant {mutant.name})"
            results = [outcome(assignment_id, t, reason if t is test else None) for t in tests]
            student = f"{tag}-mutant-{mutant.name}"
            write_submission(out / student / "run-1", course, {assignment_id: results}, {},
                             mutant.name)
            plan.mutant_failures[student] = (assignment_id, test.name, " ".join(mutant.feedback))
    return plan

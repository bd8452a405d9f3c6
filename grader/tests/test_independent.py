"""Fairness: independent correct implementations, written from the stubs' docstrings and READMEs
by someone other than the reference's author, get every point of the public and hidden suites.

`grader/tests/independent/<id>/` is laid out like assignments/, so it is graded exactly as a
student's folder would be. The grading itself is one more implementation in the selfcheck's
session of each assignment (`python -m grader selfcheck`, check "independent";
grader/instructor/judges.py `judge_independent`), which grades the solution, the stub and the
mutants anyway: a session of its own per assignment here proved nothing more. A test that fails
there grades something the contract does not promise, or the contract is unclear: fix the suite
or the docstring, not the implementation, unless the implementation really breaks the contract.
This file checks that every assignment of the manifest has one, and that an optional part it
leaves out (`NOT_ATTEMPTED`) names a real test.
"""

from __future__ import annotations

import ast

from grader.instructor.judges import independent_root, not_attempted
from grader.manifest import load_manifest
from harness.impl import REPO_ROOT

INDEPENDENT = independent_root(REPO_ROOT)
ASSIGNMENTS = sorted(p.name for p in INDEPENDENT.iterdir() if p.is_dir()
                     and not p.name.startswith(("_", ".")))


def test_every_assignment_of_the_manifest_has_an_independent_implementation():
    expected = set(load_manifest(REPO_ROOT / "assignments" / "course.toml").ids)
    missing = sorted(expected - set(ASSIGNMENTS))
    assert not missing, (f"no independent implementation for {missing}: write one in "
                         "grader/tests/independent/<id>/ (docs/authoring.md, definition of done)")


def defined_names(node: ast.AST) -> list[str]:
    """Test names a node defines: a function, or a module-level `test_x = factory(...)` (the
    allocator's suites make their trace tests that way)."""
    if isinstance(node, ast.FunctionDef):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name) and t.id.startswith("test_")]
    return []


def test_what_an_independent_implementation_skips_names_a_real_test():
    for assignment in ASSIGNMENTS:
        names = {test.split("[", 1)[0] for test in not_attempted(REPO_ROOT, assignment)}
        defined = {name for path in (REPO_ROOT / "grader" / "suites" / assignment)
                   .glob("test_*.py") for node in ast.walk(ast.parse(path.read_text()))
                   for name in defined_names(node)}
        assert names <= defined, f"{assignment}/NOT_ATTEMPTED names {sorted(names - defined)}"

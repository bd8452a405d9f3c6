"""Fairness: independent correct implementations, written from the stubs' docstrings and READMEs
by someone other than the reference's author, get every point of the public and hidden suites.

`grader/tests/independent/<id>/` is laid out like assignments/, so it is graded exactly as a
student's folder would be (screen, sandbox off, every graded test). A test that fails here
grades something the contract does not promise, or the contract is unclear: fix the suite or
the docstring, not the implementation, unless the implementation really breaks the contract.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.impl import REPO_ROOT

INDEPENDENT = REPO_ROOT / "grader" / "tests" / "independent"
ASSIGNMENTS = sorted(p.name for p in INDEPENDENT.iterdir() if p.is_dir()
                     and not p.name.startswith(("_", ".")))


def test_every_assignment_of_the_manifest_has_an_independent_implementation():
    from grader.manifest import load_manifest

    expected = set(load_manifest(REPO_ROOT / "assignments" / "course.toml").ids)
    missing = sorted(expected - set(ASSIGNMENTS))
    assert not missing, (f"no independent implementation for {missing}: write one in "
                         "grader/tests/independent/<id>/ (docs/authoring.md, definition of done)")


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_an_independent_correct_implementation_gets_every_point(assignment, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "grade", assignment, "--impl", str(INDEPENDENT),
         "--no-worksheets", "--out", str(tmp_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    results = tmp_path / "results.json"
    assert results.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    tests = json.loads(results.read_text())["tests"]
    graded = [t for t in tests if not t["extra_data"].get("not_graded_here")]
    skipped = not_attempted(assignment)
    lost = [f"{t['name']}: {t['output'][:300]}" for t in graded
            if (t["extra_data"].get("outcome") != "passed" or t["score"] != t["max_score"])
            and name_of(t) not in skipped]
    assert graded, f"no test graded {assignment}"
    assert not lost, f"{assignment}: a correct implementation lost points:\n" + "\n".join(lost)
    earned = {name_of(t) for t in graded if t["score"] and name_of(t) in skipped}
    assert not earned, f"{assignment}: points for parts it does not attempt: {sorted(earned)}"


def name_of(test: dict) -> str:
    """`test_x[param]` of a results.json test entry (its name is `<assignment>: test_x[...]`)."""
    return str(test["name"]).split(": ", 1)[-1]


def not_attempted(assignment: str) -> set[str]:
    """Tests of optional parts (a stretch goal) the implementation leaves out on purpose,
    listed one per line in `NOT_ATTEMPTED` beside it: they must score 0, the rest in full."""
    listed = INDEPENDENT / assignment / "NOT_ATTEMPTED"
    if not listed.is_file():
        return set()
    return {line.split("#")[0].strip() for line in listed.read_text().splitlines()} - {""}

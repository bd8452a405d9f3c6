"""`bench course` reads the steps of make test from the Makefile and each assignment's share
from the selfcheck's table; `bench student` is listed with the other benchmarks."""

from __future__ import annotations

import sys

import grader.bench as bench
from grader.bench.course import make_test_steps, selfcheck_shares
from grader.manifest import REPO_ROOT


def test_the_steps_are_lint_then_the_test_recipe_with_this_interpreter():
    steps = make_test_steps(REPO_ROOT / "Makefile")
    assert steps[0].startswith(f"{sys.executable} -m ruff")
    assert any("-m grader selfcheck" in s for s in steps)
    assert not any("$(PY)" in s or s.startswith("#") for s in steps)
    assert steps.index(next(s for s in steps if "mypy" in s)) < steps.index(
        next(s for s in steps if "selfcheck" in s)), "lint comes first"


def test_shares_are_read_from_the_selfcheck_table():
    table = """assignment  signatures  points  solution  time
----------  ----------  ------  --------  -----
zero2       ✓           ✓       ✓         291.8 s
ppo         ✗           -       ✓ 12/12 caught   3.0 s
"""
    assert selfcheck_shares(table) == {"zero2": 291.8, "ppo": 3.0}


def test_course_and_student_benches_are_listed():
    names = bench.available()
    assert names["course"].startswith("The steps of `make test`")
    assert names["student"].startswith("A student's waits")

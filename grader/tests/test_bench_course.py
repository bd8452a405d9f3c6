"""`bench course` reads the steps of make test from the Makefile and each assignment's share
from the selfcheck's table; `bench student` is listed with the other benchmarks."""

from __future__ import annotations

import sys

import grader.bench as bench
from grader.bench.course import make_test_steps, run_step, selfcheck_shares
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


def test_a_step_counts_the_cpu_of_processes_that_left_its_tree():
    """A process the step starts and abandons (as a rank is reparented away from the step's
    tree) is missing from the step's own CPU count and present in the machine's."""
    burn = ("import os, time\n"
            "if os.fork() == 0:\n"
            "    end = time.process_time() + 0.6\n"
            "    while time.process_time() < end: pass\n"
            "    os._exit(0)\n"
            "time.sleep(1.5)\n")
    step = run_step(f"{sys.executable} -c '{burn}'", REPO_ROOT)
    assert step.returncode == 0, step.output
    assert step.machine_cpu_s is None or step.machine_cpu_s >= 0.5, step
    assert step.cpu_s < 0.5, step

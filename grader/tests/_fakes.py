"""Fake courses and fake plugin results for the grader's own tests.

`make_course()` lays out a one-assignment course ("toy") in a temp dir: manifest, stub,
solution and a hidden suite whose tests load the code under test straight from `impl` (they
are tests of the grader, not of a harness, so they skip the rank processes). `run_json()` builds
what the plugin writes with `--mlsys-results`, for tests that fake the pytest session.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from grader.report.results import RunResult
from grader.session.runner import Session

MANIFEST = """\
[course]
name = "toy-course"
version = "1"

[[assignment]]
id = "toy"
title = "Toy adder"
part = "I. Basics"
points = {points}
public_points = 0
prerequisites = []
topics = ["adding"]
modules = ["toy"]
"""

STUB = '''\
def add(a: int, b: int = 0) -> int:
    """a + b."""
    raise NotImplementedError("add: see README §1")
'''

SOLUTION = '''\
def add(a: int, b: int = 0) -> int:
    """a + b."""
    return a + b
'''

SUITE = '''\
import importlib.util
import pathlib

import pytest


def load(impl):
    path = pathlib.Path(impl.root) / "toy" / "toy.py"
    spec = importlib.util.spec_from_file_location("toy_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.points(2)
@pytest.mark.exercises("add")
def test_add(impl):
    assert load(impl).add(2, 3) == 5, "add(2, 3) should be 5"


@pytest.mark.points(1)
@pytest.mark.exercises("add")
@pytest.mark.parametrize("a", [0, 7])
def test_zero(impl, a):
    assert load(impl).add(a) == a, "add(a) should default b to 0"


@pytest.mark.points(0)
@pytest.mark.exercises("add")
def test_add_close(impl):
    import torch

    from grader.compare import assert_close

    got = torch.tensor(float(load(impl).add(0.5, 0.25)))
    assert_close(got, torch.tensor(0.75), what="add(0.5, 0.25)")


@pytest.mark.points(4)
@pytest.mark.exercises("add")
@pytest.mark.gpu
def test_on_gpu(impl):
    assert load(impl).add(1, 1) == 2
'''


def make_course(root: Path, *, points: int = 8, stub: str = STUB, suite: str = SUITE,
                mutants: dict[str, str] | None = None) -> Path:
    """Write the toy course under `root`; returns `root`. Hidden suites live in root/suites."""
    files = {
        "assignments/course.toml": MANIFEST.format(points=points),
        "assignments/__init__.py": "",
        "assignments/toy/__init__.py": "",
        "assignments/toy/toy.py": stub,
        "solutions/__init__.py": "",
        "solutions/toy/__init__.py": "",
        "solutions/toy/toy.py": SOLUTION,
        "solutions/toy/mutants/__init__.py": "",
        "suites/__init__.py": "",
        "suites/toy/__init__.py": "",
        "suites/toy/test_toy.py": suite,
    }
    for name, text in (mutants or {}).items():
        files[f"solutions/toy/mutants/{name}.py"] = text
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def entry(name: str, outcome: str = "passed", *, points: int = 1, assignment: str = "toy",
               visibility: str = "hidden", reason: str = "", not_implemented: bool = False,
               not_graded_here: bool = False, duration: float = 0.01,
               exercises: tuple[str, ...] = ("add",)) -> dict[str, Any]:
    """One entry of the plugin's `tests` list."""
    folder = f"assignments/{assignment}" if visibility == "public" else f"suites/{assignment}"
    return {
        "nodeid": f"{folder}/test_x.py::{name}", "name": name, "assignment": assignment,
        "visibility": visibility, "points": points, "outcome": outcome, "reason": reason,
        "not_implemented": not_implemented, "not_graded_here": not_graded_here,
        "duration": duration, "exercises": list(exercises),
    }


def run_json(tests: list[dict[str, Any]], impl: str = "assignments",
             collection_errors: list[str] | None = None, exitstatus: int = 0) -> dict[str, Any]:
    """What the plugin writes with `--mlsys-results`."""
    return {"impl": impl, "tests": tests, "collection_errors": collection_errors or [],
            "exitstatus": exitstatus}


def session(tests: list[dict[str, Any]] | None, *, impl: str = "assignments",
            timed_out: bool = False, problem: str = "", **kwargs: Any) -> Session:
    """A finished `Session` whose plugin results are `tests` (None: no results file)."""
    result = None if tests is None else RunResult.from_json(run_json(tests, impl, **kwargs))
    return Session(returncode=1, timed_out=timed_out, wall_s=0.5, output_tail="",
                   result=result, problem=problem)


def stub_tests() -> list[dict[str, Any]]:
    """The toy suite as the plugin reports it against the stub."""
    reason = "not implemented yet: add: see README §1"
    return [
        entry("test_add", "failed", points=2, reason=reason, not_implemented=True),
        entry("test_zero[0]", "failed", reason=reason, not_implemented=True),
        entry("test_zero[7]", "failed", reason=reason, not_implemented=True),
        entry("test_on_gpu", "skipped", points=4, not_graded_here=True,
                   reason="not graded on this machine: needs a CUDA GPU"),
    ]


def solution_tests() -> list[dict[str, Any]]:
    """The toy suite as the plugin reports it against the solution (on a CPU machine)."""
    return [
        entry("test_add", points=2),
        entry("test_zero[0]"),
        entry("test_zero[7]"),
        entry("test_on_gpu", "skipped", points=4, not_graded_here=True,
                   reason="not graded on this machine: needs a CUDA GPU"),
    ]

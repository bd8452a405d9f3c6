"""The local worksheet cache (grader/worksheets/grading.py): a worksheet whose notebooks and
grading code are unchanged is not autograded again, and its rows are the ones grading gave;
any change, a damaged entry or no cache folder (the trusted grading) grades it again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.manifest import Assignment, Course
from grader.worksheets import grading
from grader.worksheets.nbgrade import Autograded, CellGrade
from harness.impl import ImplSpec


def _notebook(path: Path, answer: str) -> Path:
    cells = [{"cell_type": "code", "source": answer, "metadata": {}},
             {"cell_type": "code", "source": "assert True", "metadata": {"nbgrader": {
                 "grade": True, "solution": False, "grade_id": "q1", "points": 2}}}]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}))
    return path


@pytest.fixture
def course(tmp_path, monkeypatch):
    """A checkout with one worksheet (source in solutions/, the student's in a submission
    folder) and an autograde that counts its calls and fails the student's cell."""
    _notebook(tmp_path / "solutions" / "toy" / "worksheet.ipynb", "x = 1")
    _notebook(tmp_path / "sub" / "toy" / "worksheet.ipynb", "x = 2")
    calls: list[list[str]] = []

    def autograde(submissions, sources, echo=print):
        calls.append([s.assignment for s in submissions])
        grade = CellGrade("toy", "student", "q1", 0.0, 2.0, error="AssertionError: x")
        return Autograded((grade,), {}, {})

    monkeypatch.setattr(grading, "autograde", autograde)
    assignment = Assignment(id="toy", title="Toy", part="p", points=1, public_points=1,
                            prerequisites=(), topics=(), modules=("toy",), worksheet_points=2)
    return tmp_path, Course(name="c", version="1", assignments=(assignment,)), calls


def _grade(root: Path, course: Course, cache: Path | None):
    impl = ImplSpec(kind="dir", root=str(root / "sub"), text=str(root / "sub"))
    return grading.grade_worksheets(course, ["toy"], impl, root, echo=lambda line: None,
                                    cache=cache)


def test_an_unchanged_worksheet_is_graded_once_and_gives_the_same_rows(course):
    root, manifest, calls = course
    first = _grade(root, manifest, root / "cache")
    again = _grade(root, manifest, root / "cache")
    assert calls == [["toy"]], f"autograded {len(calls)} times for one notebook"
    assert again == first and first[0].reason == "AssertionError: x"


def test_any_change_or_a_damaged_entry_grades_again(course):
    root, manifest, calls = course
    _grade(root, manifest, root / "cache")
    _notebook(root / "sub" / "toy" / "worksheet.ipynb", "x = 3")  # the student's answer
    _grade(root, manifest, root / "cache")
    _notebook(root / "solutions" / "toy" / "worksheet.ipynb", "x = 4")  # the source
    _grade(root, manifest, root / "cache")
    for entry in (root / "cache").glob("*.json"):
        entry.write_text("{not json")
    _grade(root, manifest, root / "cache")
    assert len(calls) == 4, "a changed notebook or a damaged entry must be graded again"


def test_without_a_cache_folder_every_call_grades(course):
    root, manifest, calls = course
    _grade(root, manifest, None)
    _grade(root, manifest, None)
    assert len(calls) == 2 and not (root / "cache").exists()

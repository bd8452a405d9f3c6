"""The record of which test caught each mutant (grader/instructor/caught_first.py): a hint for
the order of a mutant's tests, rewritten after every selfcheck, never a verdict."""

from __future__ import annotations

from pathlib import Path

from grader.instructor import caught_first


def course(tmp_path: Path) -> Path:
    (tmp_path / "solutions" / "toy" / "mutants").mkdir(parents=True)
    return tmp_path


def test_the_record_keeps_the_mutants_caught_this_run_and_only_those(tmp_path):
    root = course(tmp_path)
    assert caught_first.load(root, "toy") == {}
    caught = {"a": "t.py::test_a", "gone": "t.py::test_b"}
    assert caught_first.save(root, "toy", caught, ["a", "b"])  # "gone" no longer exists
    assert caught_first.load(root, "toy") == {"a": "t.py::test_a"}
    assert not caught_first.save(root, "toy", {"a": "t.py::test_a"}, ["a", "b"])  # unchanged
    assert caught_first.save(root, "toy", {}, ["a", "b"])  # not caught: no hint left
    assert caught_first.load(root, "toy") == {}


def test_an_unreadable_record_means_suite_order(tmp_path):
    root = course(tmp_path)
    path = caught_first.record_path(root, "toy")
    for text in ("{not json", "[1, 2]", '{"a": 3, "b": ""}'):
        path.write_text(text)
        assert caught_first.load(root, "toy") == {}
    assert not caught_first.save(tmp_path, "missing", {"a": "t"}, ["a"])  # no mutants folder

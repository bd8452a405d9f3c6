"""The course manifest: the real one loads; every malformed field is named in the error."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from grader.manifest import Course, ManifestError, load_manifest, parse_manifest

VALID = {
    "course": {"name": "c", "version": "1"},
    "assignment": [
        {"id": "first", "title": "First", "part": "I", "points": 100, "public_points": 20,
         "prerequisites": [], "topics": ["a"], "modules": ["one"], "provided": ["helper"]},
        {"id": "second", "title": "Second", "part": "II", "points": 50, "public_points": 10,
         "prerequisites": ["first"], "topics": [], "modules": ["two", "three"]},
    ],
}


def with_change(path: str, value) -> dict:
    """VALID with one field replaced (`assignment.1.points`); value `...` deletes it."""
    data = copy.deepcopy(VALID)
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return data


def test_the_repository_manifest_loads_in_course_order():
    course = load_manifest()
    assert course.ids[0] == "ring_allreduce", course.ids
    assert len(set(course.ids)) == len(course.ids)
    for assignment in course.assignments:
        assert 0 < assignment.public_points <= assignment.points, assignment
        assert assignment.modules, assignment


def test_valid_data_becomes_frozen_dataclasses():
    course = parse_manifest(VALID)
    assert isinstance(course, Course)
    second = course.get("second")
    assert second.modules == ("two", "three")
    assert second.prerequisites == ("first",)
    assert second.provided == () and second.extra_editable == ()
    assert second.hidden_points == 40
    with pytest.raises(dataclasses.FrozenInstanceError):
        second.points = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("change", "value", "expected"),
    [
        ("assignment.0.points", "100", r"assignment\[0\] \(first\)\.points: expected an integer"),
        ("assignment.0.points", True, r"\.points: expected an integer, got True"),
        ("assignment.0.points", 0, r"\.points: must be positive"),
        ("assignment.1.public_points", 51, r"assignment\[1\] \(second\)\.public_points: must lie"),
        ("assignment.1.title", ..., r"assignment\[1\] \(second\)\.title: missing"),
        ("assignment.0.topics", "a", r"\.topics: expected a list"),
        ("assignment.0.topics", ["a", 3], r"\.topics: items must be non-empty strings"),
        ("assignment.0.modules", [], r"\.modules: lists no module"),
        ("assignment.0.modules", ["one", "one"], r"\.modules: has duplicates"),
        ("assignment.0.modules", ["one.py"], r"\.modules: 'one\.py' is not a Python module"),
        ("assignment.0.provided", ["one"], r"\.provided: \['one'\] also listed in modules"),
        ("assignment.0.id", "First", r"\.id: 'First' is not a lower_snake_case name"),
        ("assignment.1.id", "first", r"assignment\[1\] \(first\)\.id: 'first' appears twice"),
        ("assignment.0.prerequisites", ["second"], r"prerequisites: 'second' is not an earlier"),
        ("assignment.0.due", "soon", r"assignment\[0\] \(first\): unknown field\(s\): due"),
        ("course.name", ..., r"course\.name: missing"),
        ("course.version", 1, r"course\.version: expected a string"),
        ("extra", {}, r"unknown top-level table\(s\): extra"),
    ],
)
def test_each_malformed_field_is_named(change, value, expected):
    with pytest.raises(ManifestError, match=expected):
        parse_manifest(with_change(change, value), source="course.toml")


def test_missing_course_table_and_no_assignments():
    with pytest.raises(ManifestError, match=r"\[course\] table is missing"):
        parse_manifest({"assignment": VALID["assignment"]})
    with pytest.raises(ManifestError, match="no \\[\\[assignment\\]\\] tables"):
        parse_manifest({"course": VALID["course"]})


def test_unreadable_or_invalid_files_name_the_path(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(ManifestError, match="nope.toml: cannot read"):
        load_manifest(missing)
    broken = tmp_path / "broken.toml"
    broken.write_text("[course\nname = ", encoding="utf-8")
    with pytest.raises(ManifestError, match="broken.toml: not valid TOML"):
        load_manifest(broken)


def test_select_keeps_course_order_and_rejects_unknown_ids():
    course = parse_manifest(VALID)
    assert [a.id for a in course.select(["second", "first"])] == ["first", "second"]
    assert course.select([]) == course.assignments
    with pytest.raises(KeyError, match="unknown assignment 'third'.*first, second"):
        course.select(["third"])

"""The mesh's pure functions (README §3), one rank, no communication: coordinates, ranks and
axis groups of several fixed shapes (one to four axes, sizes of 1, an inner axis named before
an outer one) and of shapes drawn by hypothesis; `resolve_shape` with -1; ValueError for shapes
that do not divide, coordinates outside the mesh and unknown axes.
"""

from __future__ import annotations

import pytest

from grader.suites.nd_parallel import _ref as R
from grader.suites.nd_parallel._cases_launches import case, run, values

ROW_MAJOR = "row-major: the last axis varies fastest (consecutive ranks share its group)"


def _first_mismatch(got, c):
    if not isinstance(got, list) or len(got) != len(c["calls"]):
        return None, f"returned {type(got).__name__}, expected one result per call"
    for call, g, e in zip(c["calls"], got, c["expected"]):
        if g != e:
            return call, f"got {g!r}, expected {e!r}"
    return None, ""


def _judge(launch, impl, name: str, function: str) -> None:
    c = case("pure", name)
    got = values(run(launch, impl, "pure"), name)[0]
    call, problem = _first_mismatch(got, c)
    if problem:
        hint = ROW_MAJOR
        if call is not None and c["kind"] == "groups":
            shape, axis = call
            if [list(g) for g in got[c["calls"].index(call)]] == \
                    R.column_major_groups(dict(shape), axis):
                hint = "column-major groups: " + ROW_MAJOR
        raise AssertionError(f"{function}{tuple(call) if call else ''}: {hint} — {problem}")


@pytest.mark.exercises("mesh_coords")
@pytest.mark.parametrize("name", [
    pytest.param("coords fixed", id="fixed-shapes", marks=pytest.mark.points(2)),
    pytest.param("coords drawn", id="hypothesis-shapes", marks=pytest.mark.points(1)),
])
def test_mesh_coords(launch, impl, name):
    _judge(launch, impl, name, "mesh_coords")


@pytest.mark.exercises("mesh_rank")
@pytest.mark.parametrize("name", [
    pytest.param("rank fixed", id="fixed-shapes", marks=pytest.mark.points(2)),
    pytest.param("rank drawn", id="hypothesis-shapes", marks=pytest.mark.points(1)),
])
def test_mesh_rank(launch, impl, name):
    _judge(launch, impl, name, "mesh_rank")


@pytest.mark.exercises("axis_groups")
@pytest.mark.parametrize("name", [
    pytest.param("groups fixed", id="fixed-shapes", marks=pytest.mark.points(2)),
    pytest.param("groups drawn", id="hypothesis-shapes", marks=pytest.mark.points(1)),
])
def test_axis_groups(launch, impl, name):
    _judge(launch, impl, name, "axis_groups")


@pytest.mark.points(1)
@pytest.mark.exercises("resolve_shape")
def test_resolve_shape_infers_minus_one(launch, impl):
    c = case("pure", "resolve")
    got = values(run(launch, impl, "pure"), "resolve")[0]
    for label, g, e in zip(c["labels"], got, c["expected"]):
        assert g == e and list(g) == list(e), (
            f"resolve_shape({label}): keep the axes in order and replace one -1 by "
            f"world_size / (product of the others) — got {g!r}, expected {e!r}")


def _judge_errors(launch, impl, name: str, function: str, rule: str) -> None:
    c = case("pure", name)
    got = values(run(launch, impl, "pure"), name)[0]
    for label, g in zip(c["labels"], got):
        assert g == "ValueError", f"{function} with {label}: raise ValueError ({rule}) — {g}"


@pytest.mark.points(1)
@pytest.mark.exercises("resolve_shape")
def test_resolve_shape_rejects_shapes_that_do_not_divide(launch, impl):
    _judge_errors(launch, impl, "resolve_bad", "resolve_shape",
                  "sizes must multiply to the world size, one -1 at most, ints >= 1")


@pytest.mark.points(1)
@pytest.mark.exercises("mesh_coords", "mesh_rank", "axis_groups")
def test_bad_coordinates_and_axes(launch, impl):
    _judge_errors(launch, impl, "coords_bad", "mesh_coords", "rank outside the mesh")
    _judge_errors(launch, impl, "rank_bad", "mesh_rank", "a coordinate outside its axis")
    _judge_errors(launch, impl, "groups_bad", "axis_groups", "an axis the shape lacks")

"""`build_mesh` on 4 ranks (README §3), sidecar transport: for every axis of several shapes
(an inner axis named first, a -1 inferred, one axis, an axis of size 1) each rank all-reduces
2^rank on `mesh.group(axis)`; the sum names the group's members, and the sidecar's wire log
says which ranks the group held. Then the Mesh's coordinates, ranks, sizes; ValueError for
shapes that do not divide the world, raised on every rank.
"""

from __future__ import annotations

import pytest

from grader.suites.nd_parallel import _cases as C
from grader.suites.nd_parallel import _ref as R
from grader.suites.nd_parallel._cases_launches import expected, run, values
from grader.suites.nd_parallel._ref_judge import each_rank_raised, window
from harness.cases import where

pytestmark = pytest.mark.exercises("build_mesh")
WORLD = 4
HINT = ("row-major: the last axis varies fastest; create every group of every axis on every "
        "rank (dist.new_group) and keep this rank's")


def _judge_groups(launch, impl, label: str) -> None:
    name = f"build {label}"
    result = run(launch, impl, "four")
    got = values(result, name)
    shape = expected("four", name)
    for r in range(WORLD):
        for axis in shape:
            members = R.group_of(shape, axis, r)
            mask = sum(1 << m for m in members)
            seen = got[r]["axes"][axis]["mask"]
            held = sorted(m for m in range(WORLD) if seen >> m & 1)
            assert seen == mask, (
                f"{where(r, WORLD)} build_mesh({label}).group({axis!r}): {HINT} — an all-reduce "
                f"on it summed ranks {held}, the group is {members}")
            wire = [w for w in window(result, r, f"{name}|{axis}") if w.kind == "allreduce"]
            assert wire and all(list(w.group_ranks) == members for w in wire), (
                f"{where(r, WORLD)} build_mesh({label}).group({axis!r}): {HINT} — on the wire "
                f"the group held ranks {[list(w.group_ranks) for w in wire]}, not {members}")


@pytest.mark.parametrize("label", [
    pytest.param("dp=2,tp=2", id="dp=2-tp=2", marks=pytest.mark.points(2)),
    pytest.param("tp=2,dp=2", id="tp=2-dp=2-inner-axis-named-second",
                 marks=pytest.mark.points(1)),
    pytest.param("dp=-1,tp=2", id="dp=-1-inferred", marks=pytest.mark.points(1)),
])
def test_build_mesh_groups(launch, impl, label):
    _judge_groups(launch, impl, label)


@pytest.mark.points(1)
def test_build_mesh_one_axis_and_size_one(launch, impl):
    _judge_groups(launch, impl, "x=4")
    _judge_groups(launch, impl, "a=1,b=2,c=2")


@pytest.mark.points(1)
def test_mesh_attributes(launch, impl):
    result = run(launch, impl, "four")
    for label in C.BUILD_4:
        name = f"build {label}"
        got = values(result, name)
        shape = expected("four", name)
        for r in range(WORLD):
            g = got[r]
            coords = R.coords_ref(r, shape)
            assert g["shape"] == shape and list(g["shape"]) == list(shape), (
                f"{where(r, WORLD)} build_mesh({label}).shape: the resolved shape, axes in "
                f"order — got {g['shape']}, expected {shape}")
            assert g["coords"] == coords, (
                f"{where(r, WORLD)} build_mesh({label}).coords: {HINT} — got {g['coords']}, "
                f"expected {coords}")
            assert g["unknown"] == ["ValueError"] * 4, (
                f"{where(r, WORLD)} build_mesh({label}): Mesh.group/ranks/size/local_rank of an "
                f"axis the mesh lacks must raise ValueError — got {g['unknown']}")
            for axis in shape:
                a = g["axes"][axis]
                want = (R.group_of(shape, axis, r), shape[axis], coords[axis])
                assert (a["ranks"], a["size"], a["local_rank"]) == want, (
                    f"{where(r, WORLD)} build_mesh({label}): ranks/size/local_rank of "
                    f"{axis!r} are {a['ranks']}/{a['size']}/{a['local_rank']}, expected "
                    f"{want[0]}/{want[1]}/{want[2]}")


@pytest.mark.points(1)
def test_build_mesh_rejects_shapes_that_do_not_divide(launch, impl):
    result = run(launch, impl, "four")
    for label in C.BUILD_4_BAD:
        each_rank_raised(values(result, f"build {label}"), f"build_mesh({label}) on 4 ranks",
                         "raise ValueError before any group or communication")

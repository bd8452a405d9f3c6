"""`train_3d` on 8 ranks (README §5), sidecar transport, meshes (dp, zero, tp) = 2×2×2 and
1×2×4: the shards after 3 steps equal dense training's (float64, computed in the parent);
each rank's momentum chunk is its ZeRO-1 slice of the dense momentum (flat, names sorted);
from the wire log, every collective ran on one of the rank's three axis groups and the
parameters came back by an all-gather on the zero group. ValueError when the local parameters
do not split over the zero axis.
"""

from __future__ import annotations

import pytest

from grader.compare import assert_close
from grader.suites.nd_parallel import _cases as C
from grader.suites.nd_parallel import _ref as R
from grader.suites.nd_parallel._cases_launches import case, expected, run, values
from grader.suites.nd_parallel._ref_judge import (
    check_shards,
    each_rank_raised,
    in_their_groups,
    parity_tol,
    wire_diagnosis,
)
from harness.cases import where

pytestmark = pytest.mark.exercises("train_3d")
WORLD = 8
HINT = ("average the gradient over all dp×zero replicas, update only your ZeRO-1 chunk, then "
        "all-gather the parameters over zero_group (README §5)")
GATHERS = ("allgather", "allgather_base")


def _parity(launch, impl, label: str) -> None:
    name = f"train_3d {label}"
    result = run(launch, impl, "eight")
    got = values(result, name)
    c, want = case("eight", name), expected("eight", name)
    mesh = c["mesh"]
    tol = parity_tol(want["magnitude"], C.MODEL["steps"])
    for r in range(WORLD):
        j = R.coords_ref(r, mesh)["tp"]
        act = C.MODEL["batch"] // (mesh["dp"] * mesh["zero"]) * C.MODEL["hidden"] * 8
        cause = wire_diagnosis(result, r, name, mesh, None, C.MODEL["steps"], act)
        check_shards(got[r]["shards"], R.shard_ref(want["final"], j, mesh["tp"]),
                     f"{where(r, WORLD)} train_3d({label})", tol, cause or HINT)
        assert got[r]["detached"], (
            f"{where(r, WORLD)} train_3d: return detached tensors (no requires_grad, no grad_fn): "
            f"new tensors, e.g. param.detach().clone()")


@pytest.mark.parametrize("label", [
    pytest.param("dp=2,zero=2,tp=2", id="dp=2-zero=2-tp=2", marks=pytest.mark.points(4)),
    pytest.param("dp=1,zero=2,tp=4", id="dp=1-zero=2-tp=4", marks=pytest.mark.points(2)),
])
def test_train_3d_matches_dense_training(launch, impl, label):
    _parity(launch, impl, label)


@pytest.mark.points(3)
def test_train_3d_keeps_its_zero1_momentum_chunk(launch, impl):
    result = run(launch, impl, "eight")
    for label, mesh in C.TRAIN_3D.items():
        name = f"train_3d {label}"
        got = values(result, name)
        want = expected("eight", name)
        tol = parity_tol(want["magnitude"], C.MODEL["steps"])
        for r in range(WORLD):
            coords = R.coords_ref(r, mesh)
            flat = R.flat_ref(R.shard_ref(want["momentum"], coords["tp"], mesh["tp"]))
            chunk = flat.chunk(mesh["zero"])[coords["zero"]]
            assert_close(got[r]["momentum"], chunk,
                         what=f"{where(r, WORLD)} train_3d({label}) momentum chunk",
                         tol=tol, hint_first=True,
                         hint="keep momentum only for elements [z*n/Z, (z+1)*n/Z) of the flat "
                              "shards (names sorted, row-major)")


@pytest.mark.points(2)
def test_train_3d_collectives_stay_in_their_groups(launch, impl):
    result = run(launch, impl, "eight")
    for label in C.TRAIN_3D:
        name = f"train_3d {label}"
        values(result, name)
        mesh = case("eight", name)["mesh"]
        for r, records, allowed in in_their_groups(result, name, mesh, f"train_3d({label})"):
            gathered = [w for w in records if w.kind in GATHERS and
                        tuple(w.group_ranks) == allowed["zero"]]
            assert gathered, (
                f"{where(r, WORLD)} train_3d({label}): no all-gather on the zero group "
                f"{list(allowed['zero'])}: ZeRO-1 returns the updated chunks by all-gather")


@pytest.mark.points(1)
def test_train_3d_rejects_parameters_that_do_not_split(launch, impl):
    result = run(launch, impl, "eight")
    for label in C.TRAIN_3D_BAD:
        each_rank_raised(values(result, f"train_3d {label}"), f"train_3d({label})",
                         "raise ValueError before any communication when n is not divisible "
                         "by the zero size")

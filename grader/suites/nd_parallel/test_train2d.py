"""`train_2d` on 4 ranks (README §4), sidecar transport: after 3 SGD-momentum steps every
rank's shards equal the shards of dense training computed in the parent in float64, on a
2×2 mesh and on the degenerate 4×1 (pure DP) and 1×4 (pure TP) ones. From the wire log of each
case: every collective ran on the rank's TP group or its DP group, the TP group carried the TP
layers' traffic, and the DP group carried exactly the gradient's bytes each step. ValueError
for a batch that does not split over the replicas.
"""

from __future__ import annotations

import pytest

from grader.suites.nd_parallel import _cases as C
from grader.suites.nd_parallel import _ref as R
from grader.suites.nd_parallel._cases_launches import case, expected, run, values
from grader.suites.nd_parallel._ref_judge import (
    axis_groups_of,
    bytes_on,
    check_shards,
    each_rank_raised,
    in_their_groups,
    parity_tol,
    window,
    wire_diagnosis,
)
from harness.cases import where

pytestmark = pytest.mark.exercises("train_2d")
WORLD = 4
HINT = ("replica k trains on rows [k*B/D, (k+1)*B/D); average gradients over dp_group only, "
        "then SGD with momentum (README §4)")


def _grad_bytes(shards: dict) -> int:
    return sum(t.numel() * t.element_size() for t in shards.values())


def _act_bytes(replicas: int) -> int:
    return C.MODEL["batch"] // replicas * C.MODEL["hidden"] * 8  # float64 [rows, hidden]


def _parity(launch, impl, label: str) -> None:
    name = f"train_2d {label}"
    result = run(launch, impl, "four")
    got = values(result, name)
    c, want = case("four", name), expected("four", name)
    mesh = c["mesh"]
    tol = parity_tol(want["magnitude"], C.MODEL["steps"])
    for r in range(WORLD):
        j = R.coords_ref(r, mesh)["tp"]
        shards = R.shard_ref(want["final"], j, mesh["tp"])
        cause = wire_diagnosis(result, r, name, mesh, _grad_bytes(shards), C.MODEL["steps"],
                               _act_bytes(mesh["dp"]))
        check_shards(got[r]["shards"], shards, f"{where(r, WORLD)} train_2d({label})", tol,
                     cause or HINT)
        assert got[r]["detached"], (
            f"{where(r, WORLD)} train_2d: return detached tensors (no requires_grad, no grad_fn): "
            f"new tensors, e.g. param.detach().clone()")


@pytest.mark.parametrize("label", [
    pytest.param("dp=2,tp=2", id="dp=2-tp=2", marks=pytest.mark.points(4)),
    pytest.param("dp=4,tp=1", id="dp=4-tp=1", marks=pytest.mark.points(2)),
    pytest.param("dp=1,tp=4", id="dp=1-tp=4", marks=pytest.mark.points(2)),
])
def test_train_2d_matches_dense_training(launch, impl, label):
    _parity(launch, impl, label)


@pytest.mark.points(4)
def test_train_2d_collectives_stay_in_their_groups(launch, impl):
    result = run(launch, impl, "four")
    for label in C.TRAIN_2D:
        name = f"train_2d {label}"
        values(result, name)
        mesh = case("four", name)["mesh"]
        for r, records, allowed in in_their_groups(
                result, name, mesh, f"train_2d({label})",
                hint=": TP on tp_group, gradient averaging on dp_group only"):
            for axis in ("tp", "dp"):
                if mesh[axis] > 1:
                    assert bytes_on(records, allowed[axis]) > 0, (
                        f"{where(r, WORLD)} train_2d({label}): nothing ran on the {axis} group "
                        f"{list(allowed[axis])}: " + (
                            "give tp_group to the TP layers" if axis == "tp" else
                            "average the gradients over dp_group"))


@pytest.mark.points(3)
def test_train_2d_dp_bytes_are_the_gradients(launch, impl):
    result = run(launch, impl, "four")
    for label, mesh in C.TRAIN_2D.items():
        if mesh["dp"] == 1:
            continue
        name = f"train_2d {label}"
        values(result, name)
        want = expected("four", name)
        for r in range(WORLD):
            j = R.coords_ref(r, mesh)["tp"]
            per_step = _grad_bytes(R.shard_ref(want["final"], j, mesh["tp"]))
            group = axis_groups_of(mesh, r)["dp"]
            got = bytes_on(window(result, r, name), group)
            steps = C.MODEL["steps"]
            assert got == steps * per_step, (
                f"{where(r, WORLD)} train_2d({label}): all-reduce each gradient element once "
                f"per step on dp_group — the DP group {list(group)} carried {got} B in {steps} "
                f"steps, the gradient shards are {per_step} B per step")


@pytest.mark.points(1)
def test_train_2d_rejects_a_batch_that_does_not_split(launch, impl):
    result = run(launch, impl, "four")
    for label in C.TRAIN_2D_BAD:
        each_rank_raised(values(result, f"train_2d {label}"), f"train_2d({label})",
                         "raise ValueError before any communication when B is not divisible "
                         "by the DP size")

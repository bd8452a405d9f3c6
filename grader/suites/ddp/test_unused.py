"""Unused parameters on 2 ranks: an error by default, zeros with find_unused_parameters=True.

`ghost` is a layer no forward uses. Built with the default `find_unused_parameters`, a
backward must raise RuntimeError naming both of ghost's parameters (ghost.weight is the last
of its bucket). With `find_unused_parameters=True`, `extra` is used by rank 0 in the first
backward and by nobody in the second: the first must leave half of rank 0's gradient for extra
and zeros for ghost, the second zeros for both (extra.weight is the last of its bucket, so a
slot not cleared between backward passes shows). Bucket 0 holds ghost and extra, so it fills
only in the end-of-backward callback: every later bucket, full long before, must wait for it
(README §4's launch rule), and the all-reduces of each backward come in bucket index order.
"""

from __future__ import annotations

import pytest

from grader.compare import assert_close
from grader.suites.ddp._cases import FIND_UNUSED, wrapper2
from grader.suites.ddp._ref import allreduces, grad_tol, local_grads, pack_with_bytes
from harness.cases import case_value, where

pytestmark = pytest.mark.exercises("DistributedDataParallel")


@pytest.fixture(scope="module")
def run(launch, impl):
    return wrapper2(launch, impl.text)


@pytest.mark.points(3)
def test_unused_parameter_is_an_error_naming_it(run):
    for rank in range(run.world_size):
        outcome = run.outcomes[rank]["unused_error"]
        if outcome.get("ok"):
            raise AssertionError(
                f"{where(rank, run.world_size)} backward with an unused parameter (ghost) "
                f"raised nothing; at the end of backward, raise RuntimeError naming every "
                f"trainable parameter whose hook did not fire (README §4)")
        error = outcome["error"]
        if error.get("not_implemented") or error["type"] != "RuntimeError":
            case_value(outcome, "backward with an unused parameter", rank=rank,
                       world_size=run.world_size)
        for name in ("ghost.weight", "ghost.bias"):
            assert name in error["message"], (
                f"{where(rank, run.world_size)} the RuntimeError for unused parameters does not "
                f"name {name}: {error['message'][:100]!r}")


@pytest.mark.points(3)
def test_find_unused_parameters_averages_with_zeros(run):
    values = run.values("find_unused", "DistributedDataParallel(find_unused_parameters=True)")
    data = run.inputs["find_unused"]
    rows = data["x"].shape[1] // run.world_size
    for step in range(FIND_UNUSED["steps"]):
        per_rank = [local_grads(FIND_UNUSED, data["seed"],
                                data["x"][step, r * rows:(r + 1) * rows],
                                data["y"][step, r * rows:(r + 1) * rows],
                                use_extra=(r == 0 and step == 0))
                    for r in range(run.world_size)]
        expected = {n: sum(g[n] for g in per_rank) / run.world_size for n in per_rank[0]}
        for rank, value in enumerate(values):
            for name, ref in expected.items():
                got = value["grads"][step][name]
                what = f"{where(rank, run.world_size)} {name}.grad in backward {step + 1}"
                assert got is not None, (
                    f"{what} is None; with find_unused_parameters=True an unused parameter "
                    f"contributes zeros and gets the average (README §4)")
                assert_close(got, ref, tol=grad_tol(expected), what=what,
                             hint="unused parameters contribute zeros; every bucket is "
                                  "all-reduced once per backward, in index order")

    in_order = [size for _, size in pack_with_bytes(FIND_UNUSED)]
    for rank in range(run.world_size):
        for step in range(FIND_UNUSED["steps"]):
            records = run.wire_by_label(rank).get(f"find_unused step {step}", [])
            got = [r.bytes for r in allreduces(records)]
            assert got == in_order, (
                f"{where(rank, run.world_size)} backward {step + 1}: launch bucket i only after "
                f"buckets 0..i-1, in index order, even when a later bucket is full first "
                f"(bucket 0 holds the unused parameters; README §4) — all-reduce sizes {got} "
                f"bytes, expected {in_order}")

"""clip_grad_norm_: the global norm over all ranks, applied to the gradient shard.

3 ranks, two param groups, a frozen layer and P = 67 (two padding elements), with a threshold
small enough that clipping is active at every step: the returned norms must equal
`torch.nn.utils.clip_grad_norm_` on the single-process model, and the clipped training must
equal the single-process run.
"""

from __future__ import annotations

import pytest

from grader.suites.zero2._cases import LAUNCH_TIMEOUT, TWO_GROUPS, make_data, rank_slices
from grader.suites.zero2._ranks import rank_train
from grader.suites.zero2._ref import assert_history, reference_run
from harness.cases import where

# Every test calls the module's one public name.
pytestmark = pytest.mark.exercises("Zero2Optimizer")

WORLD = 3
SPEC = {"arch": "tiny", "dtype": "float64", "frozen": ["fc2.weight", "fc2.bias"], "steps": 4,
        "batch": 3, "clip": 0.05, "groups": TWO_GROUPS, "seed": 31, "optimizer": "adamw",
        "defaults": {"lr": 1e-2}}


@pytest.fixture(scope="module")
def run(launch):
    x, y = make_data(SPEC, WORLD)
    ref = reference_run(SPEC, x, y)
    if min(ref.norms) <= SPEC["clip"]:  # the suite's own premise, not the student's fault
        raise RuntimeError(f"suite error: clipping inactive (norms {ref.norms})")
    result = launch(rank_train, world_size=WORLD, args=(SPEC,),
                    rank_args=rank_slices(x, y, WORLD), timeout=LAUNCH_TIMEOUT)
    return result.values, ref


@pytest.mark.points(4)
def test_clip_returns_the_global_norm(run):
    values, ref = run
    for rank, value in enumerate(values):
        norms = value["norms"]
        assert len(norms) == len(ref.norms), f"{where(rank, WORLD)} got {len(norms)} norms"
        for step, (got, expected) in enumerate(zip(norms, ref.norms)):
            assert abs(got - expected) <= 1e-8 * expected, (
                f"{where(rank, WORLD)} clip_grad_norm_ at step {step + 1} returned {got:.6g}, "
                f"the single-process norm is {expected:.6g}: {_norm_hint(got, expected)}")


def _norm_hint(got: float, expected: float) -> str:
    """The likely cause of a wrong global norm, from how it compares with the right one."""
    if abs(got - WORLD * expected) <= 1e-6 * got:
        return "the norm of the summed gradient; average it (sum / N) before the norm"
    if got > expected:
        return ("it counts more than the gradient: keep the padding past P zero (the padding "
                "adds nothing to the norm)")
    return ("sum the squares of every rank's shard (all_reduce one element), of the averaged "
            "gradient, padding excluded")


@pytest.mark.points(3)
def test_clipped_training_matches(run):
    values, ref = run
    assert_history(values, ref, WORLD, hint="scale the gradient shard by min(1, max_norm / "
                                            "(norm + 1e-6)) with the global norm before step")

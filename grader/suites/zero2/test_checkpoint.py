"""Checkpoints: per-rank state_dict round trip, and the consolidated single-process state.

2 ranks (two param groups, a frozen layer) train 3 steps; each saves its `state_dict()` and the
weights through torch.save, and `consolidated_state_dict(dst)` is asked for dst 0 and 1. After
the run, a fresh model restored from the saved weights and a fresh optimizer loaded from the
saved state train steps 4 and 5 again: they must equal the uninterrupted single-process run,
and the consolidated state must equal torch's own state_dict after 3 steps.
"""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close
from grader.suites.zero2._cases import shared_run
from grader.suites.zero2._ref import TRAINING_HINT, assert_history
from harness.cases import where

# Every test calls the module's one public name.
pytestmark = pytest.mark.exercises("Zero2Optimizer")

NAME = "adamw-2-checkpoint"


@pytest.fixture(scope="module")
def run(launch, impl):
    return shared_run(launch, impl, NAME)


def _assert_trained(run) -> None:
    """The run's own training matches first: a mismatch there is the training's fault, and the
    message names its cause rather than the checkpoint."""
    assert_history(run.values, run.ref, run.world_size, hint=TRAINING_HINT, spec=run.spec)


@pytest.mark.points(4)
def test_resume_equals_uninterrupted(run):
    _assert_trained(run)
    assert_history(run.values, run.ref, run.world_size, key="resumed",
                   first_step=run.spec["checkpoint_after"],
                   hint="after load_state_dict: restore every state tensor and the step count")


def _assert_same_state(got, expected: dict, what: str) -> None:
    assert isinstance(got, dict) and "state" in got and "param_groups" in got, (
        f"{what} is {type(got).__name__}, expected a dict with 'state' and 'param_groups'")
    assert sorted(got["state"]) == sorted(expected["state"]), (
        f"{what} has state for parameters {sorted(got['state'])}, torch's single-process "
        f"optimizer for {sorted(expected['state'])} (numbered in group order, frozen included)")
    for index, entry in expected["state"].items():
        mine = got["state"][index]
        assert sorted(mine) == sorted(entry), (
            f"{what} state[{index}] has keys {sorted(mine)}, expected {sorted(entry)}")
        for key, value in entry.items():
            if torch.is_tensor(value):
                assert_close(mine[key], value, what=f"{what} state[{index}][{key!r}]", scale=10.0,
                             hint_first=True, hint="dst must gather every rank's shard of the "
                                                   "state and place each at its own offset")
            else:
                assert mine[key] == value, f"{what} state[{index}][{key!r}] is {mine[key]!r}"
    assert len(got["param_groups"]) == len(expected["param_groups"]), (
        f"{what} has {len(got['param_groups'])} param groups, expected "
        f"{len(expected['param_groups'])}")
    for g, (mine, theirs) in enumerate(zip(got["param_groups"], expected["param_groups"])):
        for key, value in theirs.items():
            assert key in mine and mine[key] == value, (
                f"{what} param_groups[{g}][{key!r}] is {mine.get(key, '(missing)')!r}, "
                f"expected {value!r}")


@pytest.mark.points(4)
def test_consolidated_state_dict(run):
    _assert_trained(run)
    expected = run.ref.states[run.spec["checkpoint_after"]]
    for dst in (0, 1):
        for rank, value in enumerate(run.values):
            got = value["consolidated"][dst]
            what = f"{where(rank, run.world_size)} consolidated_state_dict(dst={dst})"
            if rank != dst:
                assert got is None, f"{what} returned {type(got).__name__}; only dst gets it"
            else:
                _assert_same_state(got, expected, what)

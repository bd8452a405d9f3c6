"""Checkpoints: per-rank state_dict round trip, and the consolidated single-process state.

3 ranks train 3 steps; each saves its `state_dict()` (through torch.save) and rank 0 and rank 1
ask for `consolidated_state_dict(dst)`. A fresh model restored from the saved weights and a
fresh optimizer loaded from the saved state then train steps 4 and 5: they must equal the
uninterrupted single-process run, and the consolidated state must equal torch's own.
"""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close
from grader.suites.zero2._common import (
    LAUNCH_TIMEOUT,
    TWO_GROUPS,
    assert_history,
    build_model,
    make_data,
    make_optimizer,
    rank_slices,
    reference_run,
    round_trip,
    train,
    where,
)

WORLD = 3
SAVE_AFTER = 3
SPEC = {"arch": "tiny", "dtype": "float64", "frozen": ["fc2.weight", "fc2.bias"], "steps": 5,
        "batch": 3, "clip": None, "groups": TWO_GROUPS, "seed": 41, "optimizer": "adamw",
        "defaults": {"lr": 1e-2}}


def rank_checkpoint(ctx, spec, x, y):
    model = build_model(spec)
    opt = make_optimizer(ctx, spec, model)
    first = train(ctx, spec, model, opt, x, y, range(SAVE_AFTER))
    saved_state = round_trip(opt.state_dict())
    saved_weights = round_trip(model.state_dict())
    consolidated = {dst: opt.consolidated_state_dict(dst=dst) for dst in (0, 1)}
    fresh = build_model(dict(spec, seed=spec["seed"] + 1000))  # other weights until restored
    fresh.load_state_dict(saved_weights)
    resumed_opt = make_optimizer(ctx, spec, fresh)
    resumed_opt.load_state_dict(saved_state)
    second = train(ctx, spec, fresh, resumed_opt, x, y, range(SAVE_AFTER, spec["steps"]))
    return {"first": first["history"], "resumed": second["history"],
            "consolidated": consolidated}


@pytest.fixture(scope="module")
def run(launch):
    x, y = make_data(SPEC, WORLD)
    result = launch(rank_checkpoint, world_size=WORLD, args=(SPEC,),
                    rank_args=rank_slices(x, y, WORLD), timeout=LAUNCH_TIMEOUT)
    return result.values, reference_run(SPEC, x, y, state_after=(SAVE_AFTER,))


@pytest.mark.points(5)
def test_resume_equals_uninterrupted(run):
    values, ref = run
    assert_history(values, ref, WORLD, key="first", hint="before the checkpoint")
    assert_history(values, ref, WORLD, key="resumed", first_step=SAVE_AFTER,
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
                assert_close(mine[key], value, what=f"{what} state[{index}][{key!r}]", scale=10.0)
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


@pytest.mark.points(5)
def test_consolidated_state_dict(run):
    values, ref = run
    for dst in (0, 1):
        for rank, value in enumerate(values):
            got = value["consolidated"][dst]
            what = f"{where(rank, WORLD)} consolidated_state_dict(dst={dst})"
            if rank != dst:
                assert got is None, f"{what} returned {type(got).__name__}; only dst gets it"
            else:
                _assert_same_state(got, ref.states[SAVE_AFTER], what)

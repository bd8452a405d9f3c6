"""Bad input, and a data-parallel group smaller than the world.

- Trainable parameters of mixed dtypes, or of mixed devices (cpu and meta), in one param group
  must raise ValueError with a message.
- On 4 ranks split into the groups {0, 1} and {2, 3}, each group trains its own model on its own
  data: shard index and N come from the group, and each group equals its own single-process run.
- A world of one with no process group at all (the rank destroys the default one first): the
  optimizer is then a plain optimizer over one shard, and clipped training equals the
  single-process run.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from grader.suites.zero2._cases import LAUNCH_TIMEOUT, TWO_GROUPS, make_data, rank_slices
from grader.suites.zero2._ranks import build_model, make_optimizer, train
from grader.suites.zero2._ref import assert_history, reference_run, shard_numel
from harness.cases import case_value, run_cases, where

# Every test calls the module's one public name.
pytestmark = pytest.mark.exercises("Zero2Optimizer")


def rank_bad_input(ctx):
    """Each bad param group in its own case (harness.cases): a stub fails both alike."""
    zero = ctx.impl_module("zero2", "zero")
    a = nn.Parameter(torch.zeros(3, dtype=torch.float64))
    b = nn.Parameter(torch.zeros(4, dtype=torch.float32))
    c = nn.Parameter(torch.zeros(5, dtype=torch.float64, device="meta"))

    def build(params):
        zero.Zero2Optimizer(params, optimizer_class=torch.optim.SGD, lr=0.1)
        return "accepted"

    return run_cases(ctx, [("dtypes", lambda: build([{"params": [a, b]}])),
                           ("devices", lambda: build([{"params": [a, c]}]))])


@pytest.fixture(scope="module")
def bad_input(launch):
    return launch(rank_bad_input, world_size=1, timeout=LAUNCH_TIMEOUT).values[0]


def _assert_value_error(outcome: dict, case: str) -> None:
    what = f"Zero2Optimizer with trainable parameters of mixed {case} in one param group"
    error = outcome.get("error") or {}
    if outcome.get("ok") or error.get("not_implemented"):
        case_value(outcome, what)  # a stub: "not implemented yet: ..."
        raise AssertionError(f"{what} was accepted; raise ValueError naming them")
    assert error.get("type") == "ValueError", (
        f"mixed {case} raised {error.get('type')}, expected ValueError")
    assert str(error.get("message", "")).strip(), f"the ValueError for mixed {case} has no message"


@pytest.mark.points(2)
def test_mixed_dtypes_raise_value_error(bad_input):
    _assert_value_error(bad_input["dtypes"], "dtypes")


@pytest.mark.points(1)
def test_mixed_devices_raise_value_error(bad_input):
    _assert_value_error(bad_input["devices"], "devices")


WORLD = 4
GROUP_RANKS = ([0, 1], [2, 3])
SPEC = {"arch": "tiny", "dtype": "float64", "frozen": [], "steps": 3, "batch": 2, "clip": None,
        "groups": None, "seed": 51, "optimizer": "adamw", "defaults": {"lr": 1e-2}}


def rank_subgroups(ctx, spec, x, y):
    groups = [ctx.new_group(ranks) for ranks in GROUP_RANKS]  # every rank creates both
    mine = groups[0] if ctx.rank in GROUP_RANKS[0] else groups[1]
    model = build_model(spec)
    opt = make_optimizer(ctx, spec, model, group=mine)
    out = train(ctx, spec, model, opt, x, y, range(spec["steps"]))
    out["shard_bounds"] = [int(b) for b in opt.shard_bounds]
    return out


@pytest.mark.points(4)
def test_process_subgroups(launch):
    x, y = make_data(SPEC, WORLD)
    values = launch(rank_subgroups, world_size=WORLD, args=(SPEC,),
                    rank_args=rank_slices(x, y, WORLD), timeout=LAUNCH_TIMEOUT).values
    size = shard_numel(SPEC, 2)
    for rank, value in enumerate(values):
        expected = [(rank % 2) * size, (rank % 2 + 1) * size]
        assert value["shard_bounds"] == expected, (
            f"{where(rank, WORLD)} in group {GROUP_RANKS[rank // 2]}: shard_bounds "
            f"{value['shard_bounds']}, expected {expected}; use the rank and size of `group`")
    half = x.shape[1] // 2
    for g, ranks in enumerate(GROUP_RANKS):
        rows = slice(g * half, (g + 1) * half)
        ref = reference_run(SPEC, x[:, rows], y[:, rows])
        assert_history([values[r] for r in ranks], ref, 2,
                       hint=f"group {ranks} must average over its own ranks only")


ALONE = {"arch": "tiny", "dtype": "float64", "frozen": ["fc2.weight", "fc2.bias"], "steps": 3,
         "batch": 4, "clip": 0.05, "groups": TWO_GROUPS, "seed": 53, "optimizer": "adamw",
         "defaults": {"lr": 1e-2}}


def rank_without_process_group(ctx, spec, x, y):
    import torch.distributed as dist

    dist.destroy_process_group()  # the stub's "a world of one works": also with no group at all
    model = build_model(spec)
    opt = make_optimizer(ctx, spec, model)
    out = train(ctx, spec, model, opt, x, y, range(spec["steps"]))
    out["shard_bounds"] = [int(b) for b in opt.shard_bounds]
    return out


@pytest.mark.points(1)
def test_world_of_one_without_a_process_group(launch):
    x, y = make_data(ALONE, 1)
    value = launch(rank_without_process_group, world_size=1, args=(ALONE,),
                   rank_args=rank_slices(x, y, 1), timeout=LAUNCH_TIMEOUT).values[0]
    ref = reference_run(ALONE, x, y)
    what = "[world of one, no process group initialised]"
    size = shard_numel(ALONE, 1)
    assert value["shard_bounds"] == [0, size], (
        f"{what} shard_bounds {value['shard_bounds']}, expected [0, {size}]: N = 1 and r = 0 "
        f"when no process group is initialised")
    for step, (got, expected) in enumerate(zip(value["norms"], ref.norms)):
        assert abs(got - expected) <= 1e-8 * expected, (
            f"{what} clip_grad_norm_ at step {step + 1} returned {got:.6g}, the single-process "
            f"norm is {expected:.6g}")
    assert_history([value], ref, 1, hint=f"{what}: the one shard is every parameter; nothing "
                                          f"to communicate", spec=ALONE)

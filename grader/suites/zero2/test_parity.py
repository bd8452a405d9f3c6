"""Parity: ZeRO-2 on 2, 3 and 4 ranks equals single-process training on the global batch.

Each configuration (see `_common.CONFIGS`) trains 5 steps with different data per rank; after
every step every rank's parameters must equal the single-process run (plain torch, mean loss
over the global batch). The tiny model has a 1-element parameter, tensors whose sizes N does not
divide, parameters cut by shard boundaries, two param groups with different lr and weight
decay whose boundary falls inside a shard, and a frozen layer.
"""

from __future__ import annotations

import pytest
import torch

from grader.suites.zero2._cases import shared_run
from grader.suites.zero2._ref import TRAINING_HINT, assert_history, shard_numel, traffic
from harness.cases import where
from harness.commlog import windows

# Every test calls the module's one public name.
pytestmark = pytest.mark.exercises("Zero2Optimizer")


@pytest.fixture(scope="module")
def runs(launch, impl):
    return lambda name: shared_run(launch, impl, name)


@pytest.mark.points(6)
def test_adamw_two_groups_three_ranks(runs):
    run = runs("adamw-3")
    assert_history(run.values, run.ref, run.world_size, hint=TRAINING_HINT, spec=run.spec)


@pytest.mark.points(5)
def test_sgd_momentum_four_ranks(runs):
    run = runs("sgd-4")
    assert_history(run.values, run.ref, run.world_size, hint=TRAINING_HINT, spec=run.spec)


@pytest.mark.points(2)
def test_adamw_two_groups_two_ranks(runs):
    run = runs("adamw-2-checkpoint")
    assert_history(run.values, run.ref, run.world_size, hint=TRAINING_HINT, spec=run.spec)


@pytest.mark.points(1)
@pytest.mark.parametrize("name", ["adamw-3", "sgd-4"], ids="config={}".format)
def test_parameters_identical_on_every_rank(runs, name):
    run = runs(name)
    for step, params in enumerate(run.values[0]["history"]):
        for param, tensor in params.items():
            for rank in range(1, run.world_size):
                assert torch.equal(run.values[rank]["history"][step][param], tensor), (
                    f"{where(rank, run.world_size)} parameter {param} after step {step + 1} "
                    f"differs from rank 0's; every rank must copy the same all-gathered values")


@pytest.mark.points(1)
def test_frozen_parameters_untouched(runs):
    for name in ("adamw-3", "sgd-4"):
        run = runs(name)
        for rank, value in enumerate(run.values):
            for param in run.spec["frozen"]:
                assert torch.equal(value["history"][-1][param], run.ref.initial[param]), (
                    f"{where(rank, run.world_size)} frozen parameter {param} changed; "
                    f"parameters with requires_grad=False take no place in the flat space")


@pytest.mark.points(1)
@pytest.mark.parametrize("name", ["adamw-3", "sgd-4"], ids="config={}".format)
def test_shard_bounds(runs, name):
    run = runs(name)
    size = shard_numel(run.spec, run.world_size)
    for rank, value in enumerate(run.values):
        expected = [rank * size, (rank + 1) * size]
        assert value["probe"]["shard_bounds"] == expected, (
            f"{where(rank, run.world_size)} shard_bounds is {value['probe']['shard_bounds']}, "
            f"expected {expected}: S = ceil(P/N) with P counting trainable elements only")


@pytest.mark.points(2)
def test_step_without_gradients_changes_nothing(runs):
    run = runs("adamw-3")
    for rank, value in enumerate(run.values):
        for param, tensor in value["history"][-1].items():
            assert torch.equal(value["after_empty_step"][param], tensor), (
                f"{where(rank, run.world_size)} step() right after zero_grad() changed {param}; "
                f"with no gradient there is nothing to update (torch skips such parameters)")
        sent = traffic(windows(run.comm[rank]).get("empty step", []), run.world_size)
        assert sent.total == 0, (
            f"{where(rank, run.world_size)} zero_grad(); step() sent {sent.total:.0f} bytes; a "
            f"step without gradients sends no gradients or parameters")

"""Parity: ZeRO-2 on 2, 3 and 4 ranks equals single-process training on the global batch.

Each configuration trains 5 steps with different data per rank; after every step every rank's
parameters must equal the single-process run (plain torch, mean loss over the global batch).
The tiny model has a 1-element parameter, tensors whose sizes N does not divide, parameters
cut by shard boundaries, a group boundary inside a shard, and (in two configs) a frozen layer.
"""

from __future__ import annotations

import pytest
import torch

from grader.suites.zero2._common import (
    LAUNCH_TIMEOUT,
    TWO_GROUPS,
    Reference,
    assert_history,
    make_data,
    rank_slices,
    rank_train,
    reference_run,
    shard_numel,
    traffic,
    where,
    windows,
)

BASE = {"arch": "tiny", "dtype": "float64", "frozen": ["fc2.weight", "fc2.bias"], "steps": 5,
        "batch": 3, "clip": None, "groups": TWO_GROUPS}
CONFIGS = {
    "adamw-3": dict(BASE, seed=11, optimizer="adamw", defaults={"lr": 1e-2}),
    "sgd-4": dict(BASE, seed=12, optimizer="sgd", defaults={"lr": 0.05, "momentum": 0.9}),
    "adamw-2": dict(BASE, seed=13, optimizer="adamw", frozen=[],
                    defaults={"lr": 1e-2, "betas": (0.8, 0.99)}),
}
WORLD = {"adamw-3": 3, "sgd-4": 4, "adamw-2": 2}
HINT = ("check the average over ranks (divide the sum by N), the offsets of parameters cut by a "
        "shard boundary, and that each piece keeps its own group's lr and weight decay")


@pytest.fixture(scope="module")
def runs(launch):
    """runs(name) -> (values per rank, comm per rank, reference, spec); each config runs once."""
    cache: dict[str, tuple | AssertionError] = {}

    def get(name: str) -> tuple[list[dict], list, Reference, dict]:
        if name not in cache:
            spec, world_size = CONFIGS[name], WORLD[name]
            x, y = make_data(spec, world_size)
            try:
                result = launch(rank_train, world_size=world_size, args=(spec,),
                                rank_args=rank_slices(x, y, world_size), timeout=LAUNCH_TIMEOUT)
            except AssertionError as exc:  # LaunchError: fail every test of this config once
                cache[name] = exc
            else:
                cache[name] = (result.values, result.comm, reference_run(spec, x, y), spec)
        if isinstance(cache[name], AssertionError):
            raise cache[name]
        return cache[name]

    return get


@pytest.mark.points(7)
def test_adamw_two_groups_three_ranks(runs):
    values, _, ref, _ = runs("adamw-3")
    assert_history(values, ref, 3, hint=HINT)


@pytest.mark.points(6)
def test_sgd_momentum_four_ranks(runs):
    values, _, ref, _ = runs("sgd-4")
    assert_history(values, ref, 4, hint=HINT)


@pytest.mark.points(3)
def test_adamw_two_groups_two_ranks(runs):
    values, _, ref, _ = runs("adamw-2")
    assert_history(values, ref, 2, hint=HINT)


@pytest.mark.points(1)
@pytest.mark.parametrize("name", ["adamw-3", "sgd-4"])
def test_parameters_identical_on_every_rank(runs, name):
    values, _, _, _ = runs(name)
    world_size = WORLD[name]
    for step, params in enumerate(values[0]["history"]):
        for param, tensor in params.items():
            for rank in range(1, world_size):
                assert torch.equal(values[rank]["history"][step][param], tensor), (
                    f"{where(rank, world_size)} parameter {param} after step {step + 1} differs "
                    f"from rank 0's; every rank must copy the same all-gathered values")


@pytest.mark.points(1)
def test_frozen_parameters_untouched(runs):
    for name in ("adamw-3", "sgd-4"):
        values, _, ref, spec = runs(name)
        for rank, value in enumerate(values):
            for param in spec["frozen"]:
                assert torch.equal(value["history"][-1][param], ref.initial[param]), (
                    f"{where(rank, WORLD[name])} frozen parameter {param} changed; parameters "
                    f"with requires_grad=False take no place in the flat space")


@pytest.mark.points(1)
@pytest.mark.parametrize("name", ["adamw-3", "sgd-4"])
def test_shard_bounds(runs, name):
    values, _, _, spec = runs(name)
    world_size = WORLD[name]
    size = shard_numel(spec, world_size)
    for rank, value in enumerate(values):
        expected = [rank * size, (rank + 1) * size]
        assert value["probe"]["shard_bounds"] == expected, (
            f"{where(rank, world_size)} shard_bounds is {value['probe']['shard_bounds']}, "
            f"expected {expected}: S = ceil(P/N) with P counting trainable elements only")


@pytest.mark.points(2)
def test_step_without_gradients_changes_nothing(runs):
    values, comm, _, _ = runs("adamw-3")
    for rank, value in enumerate(values):
        for param, tensor in value["history"][-1].items():
            assert torch.equal(value["after_empty_step"][param], tensor), (
                f"{where(rank, 3)} step() right after zero_grad() changed {param}; with no "
                f"gradient there is nothing to update (torch skips such parameters)")
        sent = traffic(windows(comm[rank])["empty step"], 3)
        assert sent.total == 0, (
            f"{where(rank, 3)} zero_grad(); step() sent {sent.total:.0f} bytes; a step without "
            f"gradients sends nothing")

"""Memory and communication of ZeRO-2, read from the parity runs on 4 ranks (SGD with momentum)
and 3 ranks (AdamW), float64.

Memory is read inside each rank right after the first step: no parameter keeps a `.grad`, the
inner optimizer covers at most S = ceil(P/N) elements, and so do its state and its gradient.
Communication is read from the harness's log of every torch.distributed call, one window per
step: a reduce-scatter of the gradients, an all-gather of the parameters, no all-reduce of more
than one element, and DDP's 2(N-1)/N x P x 8 bytes in all.
"""

from __future__ import annotations

import pytest

from grader.suites.zero2._cases import Run, shared_run
from grader.suites.zero2._ref import (
    check_step_traffic,
    expected_bytes,
    shard_numel,
    trainable_numel,
)
from harness.cases import where
from harness.commlog import windows

# Every test calls the module's one public name.
pytestmark = pytest.mark.exercises("Zero2Optimizer")

NAMES = ("sgd-4", "adamw-3")
ELEMENT_SIZE = 8  # float64


@pytest.fixture(scope="module")
def runs(launch, impl) -> list[Run]:
    return [shared_run(launch, impl, name) for name in NAMES]


def _probes(runs: list[Run]):
    for run in runs:
        for rank, value in enumerate(run.values):
            yield run, where(rank, run.world_size), rank, value["probe"]


@pytest.mark.points(3)
def test_gradients_freed_after_step(runs):
    for _, at, _, probe in _probes(runs):
        left = probe["grads_left"]
        assert not left, (
            f"{at} after step() {len(left)} parameters still hold a full .grad (first: "
            f"{left[0]}); ZeRO-2 keeps only the gradient shard: set .grad to None once it is "
            f"reduce-scattered")


@pytest.mark.points(2)
def test_inner_optimizer_covers_the_shard_only(runs):
    for run, at, _, probe in _probes(runs):
        size = shard_numel(run.spec, run.world_size)
        assert probe["is_inner_class"], (
            f"{at} .inner is not an instance of optimizer_class ({run.spec['optimizer']})")
        assert probe["inner_numel"] <= size, (
            f"{at} .inner's parameters hold {probe['inner_numel']} elements; a shard holds at "
            f"most S = ceil(P/N) = {size}")


@pytest.mark.points(4)
def test_optimizer_state_sharded(runs):
    for run, at, _, probe in _probes(runs):
        size = shard_numel(run.spec, run.world_size)
        state = probe["state_numel"]
        assert state, (f"{at} .inner has no per-element state after a step; the shard's "
                       f"moments or momentum must live in .inner.state")
        for key, numel in state.items():
            assert numel <= size, (
                f"{at} optimizer state {key!r} holds {numel} elements on this rank; ZeRO "
                f"shards it: at most S = ceil(P/N) = {size} (P = {trainable_numel(run.spec)})")


@pytest.mark.points(2)
def test_gradient_shard_size(runs):
    for run, at, rank, probe in _probes(runs):
        size, numel = shard_numel(run.spec, run.world_size), trainable_numel(run.spec)
        real = max(0, min(numel, (rank + 1) * size) - rank * size)
        got = probe["inner_grad_numel"]
        assert real <= got <= size, (
            f"{at} the gradient shard (.grad of .inner's parameters after step) holds {got} "
            f"elements; expected between {real} and S = {size}")


def _steps(runs: list[Run]):
    for run in runs:
        for rank, records in enumerate(run.comm):
            win = windows(records)
            for step in range(run.spec["steps"]):
                what = f"{where(rank, run.world_size)} step {step + 1}"
                numel = trainable_numel(run.spec)
                yield run.world_size, numel, what, win.get(f"step {step}", [])


@pytest.mark.points(3)
def test_gradient_traffic_is_a_reduce_scatter(runs):
    for world_size, numel, what, records in _steps(runs):
        lo, hi = expected_bytes(numel, world_size, ELEMENT_SIZE)
        t = check_step_traffic(records, world_size, numel, ELEMENT_SIZE, what)
        if t.p2p == 0:
            assert 0.99 * lo / 2 <= t.reduce_scatter <= 1.01 * hi / 2, (
                f"{what}: reduce-scatters carried {t.reduce_scatter:.0f} bytes; the gradient "
                f"half is (N-1)/N x P x 8 = {lo / 2:.0f}")


@pytest.mark.points(3)
def test_parameter_traffic_is_an_all_gather(runs):
    for world_size, numel, what, records in _steps(runs):
        lo, hi = expected_bytes(numel, world_size, ELEMENT_SIZE)
        t = check_step_traffic(records, world_size, numel, ELEMENT_SIZE, what)
        if t.p2p == 0:
            assert 0.99 * lo / 2 <= t.all_gather <= 1.01 * hi / 2, (
                f"{what}: all-gathers carried {t.all_gather:.0f} bytes; the parameter half is "
                f"(N-1)/N x P x 8 = {lo / 2:.0f}; all-gather every shard once per step")


@pytest.mark.points(3)
def test_bytes_per_step_equal_ddp(runs):
    for world_size, numel, what, records in _steps(runs):
        check_step_traffic(records, world_size, numel, ELEMENT_SIZE, what)

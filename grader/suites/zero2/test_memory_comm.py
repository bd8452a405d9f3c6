"""Memory and communication of ZeRO-2 on 4 ranks (float32 MLP of about 5k parameters).

Memory is read inside each rank right after the first step: no parameter keeps a `.grad`, the
inner optimizer covers at most S = ceil(P/N) elements, and so do its state and its gradient.
Communication is read from the harness's log of every torch.distributed call, one window per
step: a reduce-scatter of the gradients, an all-gather of the parameters, no all-reduce of more
than one element, and DDP's 2(N-1)/N x P x 4 bytes in all.
"""

from __future__ import annotations

import pytest

from grader.suites.zero2._common import (
    LAUNCH_TIMEOUT,
    check_step_traffic,
    expected_bytes,
    make_data,
    rank_slices,
    rank_train,
    shard_numel,
    trainable_numel,
    where,
    windows,
)

WORLD = 4
SPEC = {"arch": "mlp", "widths": [4, 24, 48, 48, 24, 3], "dtype": "float32", "frozen": [],
        "optimizer": "adamw", "defaults": {"lr": 1e-3, "weight_decay": 0.01}, "groups": None,
        "steps": 3, "batch": 2, "clip": None, "seed": 21}
ELEMENT_SIZE = 4


@pytest.fixture(scope="module")
def run(launch):
    x, y = make_data(SPEC, WORLD)
    result = launch(rank_train, world_size=WORLD, args=(SPEC,),
                    rank_args=rank_slices(x, y, WORLD), timeout=LAUNCH_TIMEOUT)
    return result.values, result.comm


def _probes(run):
    values, _ = run
    return [(rank, value["probe"]) for rank, value in enumerate(values)]


@pytest.mark.points(3)
def test_gradients_freed_after_step(run):
    for rank, probe in _probes(run):
        left = probe["grads_left"]
        assert not left, (
            f"{where(rank, WORLD)} after step() {len(left)} parameters still hold a full .grad "
            f"(first: {left[0]}); ZeRO-2 keeps only the gradient shard: set .grad to None once "
            f"it is reduce-scattered")


@pytest.mark.points(2)
def test_inner_optimizer_covers_the_shard_only(run):
    size = shard_numel(SPEC, WORLD)
    for rank, probe in _probes(run):
        assert probe["is_inner_class"], (
            f"{where(rank, WORLD)} .inner is not an instance of optimizer_class (AdamW here)")
        assert probe["inner_numel"] <= size, (
            f"{where(rank, WORLD)} .inner's parameters hold {probe['inner_numel']} elements; "
            f"a shard holds at most S = ceil(P/N) = {size}")


@pytest.mark.points(4)
def test_optimizer_state_sharded(run):
    size = shard_numel(SPEC, WORLD)
    for rank, probe in _probes(run):
        state = probe["state_numel"]
        assert state, (f"{where(rank, WORLD)} .inner has no per-element state after a step; the "
                       f"AdamW moments of the shard must live in .inner.state")
        for key, numel in state.items():
            assert numel <= size, (
                f"{where(rank, WORLD)} optimizer state {key!r} holds {numel} elements on this "
                f"rank; ZeRO shards it: at most S = ceil(P/N) = {size} (P = "
                f"{trainable_numel(SPEC)})")


@pytest.mark.points(2)
def test_gradient_shard_size(run):
    size, numel = shard_numel(SPEC, WORLD), trainable_numel(SPEC)
    for rank, probe in _probes(run):
        real = max(0, min(numel, (rank + 1) * size) - rank * size)
        got = probe["inner_grad_numel"]
        assert real <= got <= size, (
            f"{where(rank, WORLD)} the gradient shard (.grad of .inner's parameters after "
            f"step) holds {got} elements; expected between {real} and S = {size}")


def _steps(run):
    _, comm = run
    for rank, records in enumerate(comm):
        win = windows(records)
        for step in range(SPEC["steps"]):
            yield rank, step, win.get(f"step {step}", [])


@pytest.mark.points(3)
def test_gradient_traffic_is_a_reduce_scatter(run):
    numel = trainable_numel(SPEC)
    lo, hi = expected_bytes(numel, WORLD, ELEMENT_SIZE)
    for rank, step, records in _steps(run):
        what = f"{where(rank, WORLD)} step {step + 1}"
        t = check_step_traffic(records, WORLD, numel, ELEMENT_SIZE, what)
        if t.p2p == 0:
            assert 0.99 * lo / 2 <= t.reduce_scatter <= 1.01 * hi / 2, (
                f"{what}: reduce-scatters carried {t.reduce_scatter:.0f} bytes; the gradient "
                f"half is (N-1)/N x P x 4 = {lo / 2:.0f}")


@pytest.mark.points(3)
def test_parameter_traffic_is_an_all_gather(run):
    numel = trainable_numel(SPEC)
    lo, hi = expected_bytes(numel, WORLD, ELEMENT_SIZE)
    for rank, step, records in _steps(run):
        what = f"{where(rank, WORLD)} step {step + 1}"
        t = check_step_traffic(records, WORLD, numel, ELEMENT_SIZE, what)
        if t.p2p == 0:
            assert 0.99 * lo / 2 <= t.all_gather <= 1.01 * hi / 2, (
                f"{what}: all-gathers carried {t.all_gather:.0f} bytes; the parameter half is "
                f"(N-1)/N x P x 4 = {lo / 2:.0f}; all-gather every shard once per step")


@pytest.mark.points(3)
def test_bytes_per_step_equal_ddp(run):
    numel = trainable_numel(SPEC)
    for rank, step, records in _steps(run):
        check_step_traffic(records, WORLD, numel, ELEMENT_SIZE,
                           f"{where(rank, WORLD)} step {step + 1}")

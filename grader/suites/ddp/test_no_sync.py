"""no_sync(): 3 micro-batches on 4 ranks, the first 2 backward passes inside `no_sync()`.

Inside, nothing may reach the wire (the sidecars' log) and `.grad` holds the local sum; the
third backward, outside, all-reduces each bucket once and leaves the average over ranks of the
accumulated sums.
"""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close
from grader.suites.ddp._cases import NO_SYNC4, wrapper4
from grader.suites.ddp._ref import allreduces, describe_kinds, grad_tol, local_grads, pack
from harness.cases import where

pytestmark = pytest.mark.exercises("DistributedDataParallel")


@pytest.fixture(scope="module")
def run(launch, impl):
    return wrapper4(launch, impl.text)


def accumulated(run, rank: int, micro: range) -> dict[str, torch.Tensor]:
    data = run.inputs["nosync4"]
    rows = data["x"].shape[1] // run.world_size
    total: dict[str, torch.Tensor] = {}
    for j in micro:
        g = local_grads(NO_SYNC4, data["seed"], data["x"][j, rank * rows:(rank + 1) * rows],
                        data["y"][j, rank * rows:(rank + 1) * rows])
        for name, value in g.items():
            total[name] = total.get(name, 0) + value
    return total


@pytest.mark.points(3)
def test_nothing_communicated_inside_no_sync(run):
    run.values("nosync4", "DistributedDataParallel.no_sync")
    buckets = len(pack(NO_SYNC4))
    for rank in range(run.world_size):
        by_label = run.wire_by_label(rank)
        inside = by_label.get("nosync4 inside", [])
        assert not inside, (
            f"{where(rank, run.world_size)} {describe_kinds(inside)} inside no_sync() (2 "
            f"backward passes); no_sync must communicate nothing, .grad accumulates locally "
            f"(README §5)")
        last = allreduces(by_label.get("nosync4 sync", []))
        assert len(last) == buckets, (
            f"{where(rank, run.world_size)} the backward after no_sync() made {len(last)} "
            f"all-reduces, expected one per bucket ({buckets})")


@pytest.mark.points(3)
def test_accumulated_gradient_averaged_once(run):
    values = run.values("nosync4", "DistributedDataParallel.no_sync")
    k = NO_SYNC4["steps"]
    sums = [accumulated(run, r, range(k)) for r in range(run.world_size)]
    expected = {n: sum(s[n] for s in sums) / run.world_size for n in sums[0]}
    for rank, value in enumerate(values):
        local = accumulated(run, rank, range(k - 1))
        for name, ref in local.items():
            assert_close(value["local"][name], ref, tol=grad_tol(local),
                         what=f"{where(rank, run.world_size)} {name}.grad inside no_sync()",
                         hint="inside no_sync() .grad is the local sum, as plain autograd "
                              "leaves it")
        for name, ref in expected.items():
            assert_close(value["grads"][name], ref, tol=grad_tol(expected),
                         what=f"{where(rank, run.world_size)} {name}.grad after the synced "
                              f"backward",
                         hint="all-reduce the whole accumulated .grad once, then divide by N")

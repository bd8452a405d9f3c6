"""Overlap: bucket 0's all-reduce is issued while backward still computes the first layer.

In the 4-rank SGD run the first layer's output passes through an identity whose backward marks
"tap" right before autograd computes the first layer's gradients (`_ranks.Tap`). Bucket 0
holds head.bias and head.weight, which are complete long before that, so under the README's
launch rule its all-reduce is carried before the mark, in every step: the sidecars' log
(written outside the ranks) says which mark each operation came after. And no work handle may
be waited on before the mark: the handles are waited on by the end-of-backward callback.
"""

from __future__ import annotations

import pytest

from grader.suites.ddp._cases import SGD4, wrapper4
from grader.suites.ddp._ref import allreduces, pack
from harness.cases import where

pytestmark = pytest.mark.exercises("DistributedDataParallel")


@pytest.fixture(scope="module")
def run(launch, impl):
    return wrapper4(launch, impl.text)


@pytest.mark.points(4)
def test_first_all_reduce_before_the_last_gradient(run):
    run.values("sgd4", "DistributedDataParallel training")
    for rank in range(run.world_size):
        by_label = run.wire_by_label(rank)
        for step in range(SGD4["steps"]):
            early = allreduces(by_label.get(f"sgd4 step {step}", []))
            late = allreduces(by_label.get(f"sgd4 step {step} tap", []))
            assert early, (
                f"{where(rank, run.world_size)} step {step + 1}: no all-reduce was issued "
                f"before backward reached the first layer ({len(late)} after it); fill buckets "
                f"in reverse registration order and launch each as soon as it is full, from "
                f"the gradient hook (README §4)")


@pytest.mark.points(2)
def test_no_handle_waited_on_during_backward(run):
    values = run.values("sgd4", "DistributedDataParallel training")
    for rank, value in enumerate(values):
        for step in range(SGD4["steps"]):
            waits = value["waits"].get(f"sgd4 step {step}", 0)
            assert waits == 0, (
                f"{where(rank, run.world_size)} step {step + 1}: {waits} wait(s) on an "
                f"all-reduce before backward reached the first layer; launch with "
                f"async_op=True and wait only in the end-of-backward callback (README §4)")


def handled(value: dict, prefix: str) -> int:
    """Handles waited on, or whose future was asked for, under every label of `prefix`."""
    return sum(n for kind in ("waits", "futures") for label, n in value[kind].items()
               if label == prefix or label.startswith(prefix + " "))


@pytest.mark.points(2)
def test_every_handle_waited_on_by_the_end_of_backward(run):
    values = run.values("sgd4", "DistributedDataParallel training")
    buckets = len(pack(SGD4))
    for rank, value in enumerate(values):
        for step in range(SGD4["steps"]):
            got = handled(value, f"sgd4 step {step}")
            assert got >= buckets, (
                f"{where(rank, run.world_size)} step {step + 1}: {got} all-reduce handle(s) "
                f"waited on during backward, for {buckets} buckets; the end-of-backward "
                f"callback waits on every handle before it writes .grad (README §4)")

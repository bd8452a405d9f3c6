"""Training-step traces (README §7): every statistic, the snapshot and the device's counters
equal the reference policy's after every operation. The traces are made here, in the parent,
from seeds: a few steps of a small transformer's forward, backward and optimizer step, with a
varying token count, with and without a communication stream, on a roomy device and on one
too small to hold the cache (the out-of-memory retry runs)."""

from __future__ import annotations

import random

from grader.seeds import shifted
from grader.suites.allocator._cases import TraceTests, capacity_for, training_trace

ROOMY = 1 << 40


def trace(seed: int, layers: int, steps: int, hidden: int, comm: bool) -> list[tuple]:
    return training_trace(random.Random(shifted(seed)), layers, steps, hidden, comm)


PLAIN = [trace(10 + k, 4, 3, 512 * (1 + k), False) for k in range(3)]
COMM = [trace(20 + k, 3 + k, 3, 1024, True) for k in range(3)]
TIGHT = [trace(30 + k, 4, 3, 768 + 256 * k, k != 1) for k in range(3)]

TRACES = TraceTests({
    **{f"plain_hidden={512 * (1 + k)}": (ROOMY, ops) for k, ops in enumerate(PLAIN)},
    **{f"comm_layers={3 + k}": (ROOMY, ops) for k, ops in enumerate(COMM)},
    **{f"tight_capacity_{k}": (capacity_for(ops, 0.3 + 0.3 * k), ops)
       for k, ops in enumerate(TIGHT)},
})
runs = TRACES.runs

test_training_steps_single_stream = TRACES.test(
    4, *(f"plain_hidden={512 * (1 + k)}" for k in range(3)))
test_training_steps_with_communication_stream = TRACES.test(
    4, *(f"comm_layers={3 + k}" for k in range(3)))
test_training_steps_on_a_device_too_small_for_the_cache = TRACES.test(
    4, *(f"tight_capacity_{k}" for k in range(3)))

"""The cases of the allocator suite: allocation traces made in the parent, and the launch that
runs a module's named traces.

`training_trace` plays a few steps of a small transformer's training loop: parameters that
live throughout, activations saved in the forward pass and freed in reverse in the backward
pass, short-lived temporaries, gradients handed to a communication stream (record_stream, a
queued all-reduce) and optimizer state. The token count varies from step to step, so freed
blocks do not fit the next step exactly: that is where fragmentation, splitting and coalescing
show. `capacity_for` picks a device capacity that makes the out-of-memory retry happen.

`drawn_trace` turns integers drawn by hypothesis into a valid operation sequence (ids name
live blocks; sizes from tiny to beyond 10 MiB, with the pool and split boundaries favoured).

A module's traces and tests:

    TRACES = TraceTests({"best_fit": (capacity, ops), ...})
    runs = TRACES.runs                      # the module's launch fixture
    test_best_fit = TRACES.test(4, "best_fit")

Every trace of a module runs on a fresh device and allocator in one rank launch, each in its
own error scope; `test(points, *names)` passes when each named trace matches the reference
model (`_ref_judge.judge_trace`) and exercises CachingAllocator. `expandable=True` (STRETCH,
README §12) runs every trace of the module with `CachingAllocator(device,
expandable_segments=True)`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from grader.suites.allocator._ranks import rank_run_traces
from grader.suites.allocator._ref import Model
from grader.suites.allocator._ref_judge import judge_trace
from harness.cases import case_value

MIB = 1 << 20
COMM_STREAM = 1
BOUNDARY_SIZES = (1, 511, 512, 513, MIB - 512, MIB, MIB + 1, 2 * MIB, 10 * MIB - 512,
                  10 * MIB, 19 * MIB, 20 * MIB - MIB, 20 * MIB - 512)


def training_trace(rng: random.Random, layers: int, steps: int, hidden: int,
                   comm: bool) -> list[tuple]:
    ops: list[tuple] = []
    counter = iter(range(10**9))

    def malloc(size: int, stream: int = 0) -> int:
        tag = next(counter)
        ops.append(("malloc", tag, size, stream))
        return tag

    params = [(malloc(4 * hidden * hidden * 2), malloc(2 * hidden)) for _ in range(layers)]
    optimizer_state: list[int] = []
    for step in range(steps):
        tokens = hidden * rng.choice((3, 4, 5, 6))
        saved = []
        for _ in range(layers):
            act = malloc(tokens * 2 * rng.choice((4, 4, 8)))
            tmp = malloc(tokens * 2 * 4 + rng.randrange(0, 4096))
            small = malloc(rng.randrange(1, 9000))
            ops.append(("free", tmp))
            saved.append((act, small))
        loss = malloc(4)
        grads = []
        for layer in reversed(range(layers)):
            act, small = saved[layer]
            g_in = malloc(tokens * 2 * 4)
            g_w = malloc(4 * hidden * hidden * 2)
            g_b = malloc(2 * hidden)
            ops += [("free", act), ("free", small), ("free", g_in)]
            if comm:
                ops += [("record", g_w, COMM_STREAM), ("launch", COMM_STREAM)]
            grads += [g_w, g_b]
        ops.append(("free", loss))
        if step == 0:
            optimizer_state = [malloc(4 * hidden * hidden * 4) for _ in range(layers)]
        if comm and rng.random() < 0.5:
            ops.append(("complete", COMM_STREAM))
        ops += [("free", g) for g in grads]
        if comm and rng.random() < 0.5:
            ops.append(("complete", COMM_STREAM))
        if rng.random() < 0.2:
            ops.append(("empty",))
    ops += [("free", t) for pair in params for t in pair]
    ops += [("free", t) for t in optimizer_state]
    if comm:
        ops.append(("sync",))
    ops.append(("empty",))
    return ops


def peak_reserved(ops: list[tuple], capacity: int = 1 << 50) -> tuple[int, int]:
    """(peak reserved, peak allocated) bytes of `ops` on a device of `capacity`."""
    model = Model(capacity)
    for op in ops:
        model.step(op)
    return model.stats["peak_reserved_bytes"], model.stats["peak_allocated_bytes"]


def capacity_for(ops: list[tuple], squeeze: float) -> int:
    """A capacity between the trace's peak allocated and peak reserved bytes (squeeze 0..1 of
    the way down), so the cache has to be emptied at least once."""
    reserved, allocated = peak_reserved(ops)
    return int(reserved - squeeze * (reserved - allocated)) // MIB * MIB


# -- hypothesis draws -------------------------------------------------------------------------
def draw_size(value: int) -> int:
    kind, value = value % 6, value // 6
    if kind == 0:
        return BOUNDARY_SIZES[value % len(BOUNDARY_SIZES)]
    if kind == 1:
        return 1 + value % 8192
    if kind == 2:
        return 1 + value % MIB
    if kind == 3:
        return MIB + value % (9 * MIB)
    if kind == 4:
        return 512 * (1 + value % 4096)
    return 10 * MIB + value % (30 * MIB)


def drawn_trace(values: list[int], num_streams: int) -> list[tuple]:
    """One operation per drawn integer (scrambled, split into fields), made valid against the
    live tags; every live block is freed and the cache emptied at the end."""
    ops: list[tuple] = []
    live: list[int] = []
    last_freed: tuple[int, int] | None = None
    counter = iter(range(10**9))
    for raw in values:
        v = (raw * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % 2**64
        kind, v = v % 16, v // 16
        stream, v = v % num_streams, v // num_streams
        if kind < 6 or not live:
            tag = next(counter)
            ops.append(("malloc", tag, draw_size(v), stream))
            live.append(tag)
        elif kind < 9:
            tag = live.pop(v % len(live))
            ops.append(("free", tag))
            last_freed = next(((op[2], op[3]) for op in ops if op[:2] == ("malloc", tag)), None)
        elif kind == 9 and last_freed is not None:
            # free-then-allocate of the same size on the same stream must hit the cache
            tag = next(counter)
            ops.append(("malloc", tag, last_freed[0], last_freed[1]))
            live.append(tag)
        elif kind in (10, 11):
            ops.append(("record", live[v % len(live)], (stream + 1) % num_streams))
        elif kind == 12:
            ops.append(("launch", stream))
        elif kind == 13:
            ops.append(("complete", stream))
        elif kind == 14:
            ops.append(("sync",) if v % 2 else ("empty",))
        else:
            ops.append(("launch", stream))
    ops += [("free", tag) for tag in live]
    ops += [("sync",), ("empty",)]
    return ops


Trace = tuple[int, list[tuple]]  # (device capacity, operations)


class TraceTests:
    """The launch and the graded tests of a module whose tests judge named traces."""

    def __init__(self, traces: Mapping[str, Trace], timeout: float = 120.0,
                 expandable: bool = False) -> None:
        self.traces = traces
        self.expandable = expandable

        @pytest.fixture(scope="module", name="runs")
        def runs(launch: Callable[..., Any]) -> dict[str, Any]:
            payload = [{"capacity": cap, "ops": ops, "expandable": expandable}
                       for cap, ops in traces.values()]
            outcomes = launch(rank_run_traces, world_size=1, args=(payload,),
                              timeout=timeout).values[0]
            return dict(zip(traces, outcomes, strict=True))

        self.runs = runs

    def test(self, points: int, *names: str) -> Callable[[dict[str, Any]], None]:
        traces, expandable = self.traces, self.expandable

        @pytest.mark.exercises("CachingAllocator")
        @pytest.mark.points(points)
        def test(runs: dict[str, Any]) -> None:
            for name in names:
                capacity, ops = traces[name]
                trace = case_value(runs[name], f"CachingAllocator on the {name!r} trace")
                judge_trace(capacity, ops, trace, name, expandable=expandable)

        return test

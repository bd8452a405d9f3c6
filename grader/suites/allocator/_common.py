"""Parent side of the allocator suite: named traces run in one launch, judged by the model.

    TRACES = TraceTests({"best_fit": (capacity, ops), ...})
    runs = TRACES.runs                      # the module's launch fixture
    test_best_fit = TRACES.test(4, "best_fit")

Every trace of a module runs on a fresh device and allocator in one rank launch, each in its
own error scope; `test(points, *names)` passes when each named trace matches the reference
model (`_judge.judge_trace`) and exercises CachingAllocator. `expandable=True` (STRETCH, README
§12) runs every trace of the module with `CachingAllocator(device, expandable_segments=True)`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from grader.suites.allocator._judge import judge_trace
from grader.suites.allocator._ranks import rank_run_traces
from harness.cases import case_value

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

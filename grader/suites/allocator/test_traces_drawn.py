"""Property-based traces (hypothesis, drawn in the parent from fixed seeds): malloc of sizes
from 1 byte to 40 MiB (pool and split boundaries favoured), free, free-then-malloc of the same
size (a cache hit), record_stream, kernels queued and completed on up to three streams,
synchronize and empty_cache, on devices from tight to roomy. After every operation: live
blocks never overlap and tile their segments, sizes and addresses are multiples of 512, every
byte is accounted for (statistics against the snapshot and the device), and the snapshot,
every statistic and the device's counters equal the reference policy's."""

from __future__ import annotations

from hypothesis import strategies as st

from grader.seeds import drawn_integers, hypothesis_examples
from grader.suites.allocator._cases import TraceTests, drawn_trace

MIB = 1 << 20
EXAMPLES = 12


def drawn(seed: int, streams: int) -> list[list[tuple]]:
    raws = hypothesis_examples(st.lists(drawn_integers(), min_size=20, max_size=90),
                               EXAMPLES, seed)
    return [drawn_trace(raw, streams) for raw in raws]


CONFIGS = {"one_stream": (1, 256 * MIB, 1), "three_streams": (3, 256 * MIB, 2),
           "tight_device": (2, 48 * MIB, 3)}
TRACES = TraceTests({f"{name}_{k}": (capacity, ops)
                     for name, (streams, capacity, seed) in CONFIGS.items()
                     for k, ops in enumerate(drawn(seed, streams))})
runs = TRACES.runs

test_drawn_traces_one_stream = TRACES.test(
    4, *(f"one_stream_{k}" for k in range(EXAMPLES)))
test_drawn_traces_three_streams = TRACES.test(
    6, *(f"three_streams_{k}" for k in range(EXAMPLES)))
test_drawn_traces_tight_device = TRACES.test(
    4, *(f"tight_device_{k}" for k in range(EXAMPLES)))

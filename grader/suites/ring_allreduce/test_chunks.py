"""chunk_bounds (hidden suite): the exact split the README specifies, and its errors."""

from __future__ import annotations

import pytest

from grader.suites.ring_allreduce._cases import TIMEOUT_S
from grader.suites.ring_allreduce._ranks import chunk_errors, chunk_table
from grader.suites.ring_allreduce._ref import chunk_slices

PAIRS = [(numel, size) for size in range(1, 9)
         for numel in sorted({0, 1, size - 1, size, size + 1, 2 * size + 3, 10007, 1 << 20})]


@pytest.mark.exercises("chunk_bounds")
@pytest.mark.points(2)
def test_chunk_bounds_split(launch):
    """Tiles [0, numel) in order, sizes differ by at most one, larger chunks first."""
    got = launch(chunk_table, 1, args=(PAIRS,), timeout=TIMEOUT_S).values[0]
    for (numel, size), bounds in zip(PAIRS, got):
        expected = [list(b) for b in chunk_slices(numel, size)]
        if bounds == expected:
            continue
        if len(bounds) != size:
            problem = f"returned {len(bounds)} chunks for world_size={size}; return one per rank"
        elif any(len(b) != 2 for b in bounds) or [b[0] for b in bounds[1:]] != \
                [b[1] for b in bounds[:-1]] or bounds[0][0] != 0 or bounds[-1][1] != numel:
            problem = "chunks do not tile [0, numel) in order"
        else:
            sizes = [end - start for start, end in bounds]
            problem = (f"chunk sizes {sizes[:8]}{'...' if size > 8 else ''}; sizes must differ "
                       "by at most one, with the first numel % world_size chunks larger")
        raise AssertionError(f"chunk_bounds: {problem}")


@pytest.mark.exercises("chunk_bounds")
@pytest.mark.points(1)
def test_chunk_bounds_rejects_bad_arguments(launch):
    bad = [(-1, 4), (10, 0), (0, -2)]
    got = launch(chunk_errors, 1, args=(bad,), timeout=TIMEOUT_S).values[0]
    for (numel, size), name in zip(bad, got):
        if name != "ValueError":
            raise AssertionError(f"chunk_bounds(numel={numel}, world_size={size}) gave "
                                 f"{name}; it must raise ValueError")

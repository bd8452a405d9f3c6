"""Out of memory (README §5): the retry empties the cache (synchronize, pending blocks back,
every unsplit free segment released, nothing else) and calls the device once more; when that
fails too, OutOfMemoryError reports the request, allocated and reserved bytes."""

from __future__ import annotations

from grader.suites.allocator._cases import TraceTests

MIB = 1 << 20

# 44 MiB device. a: own 12 MiB segment; b: 3 MiB of a 20 MiB segment (17 MiB cached, split);
# c: a 2 MiB small segment. Freeing a and c leaves two unsplit free segments; 18 MiB needs a new
# segment (the 17 MiB block is too small), the device is full, the retry releases exactly those
# two, and the second device call succeeds.
RETRY = [
    ("malloc", "a", 12 * MIB, 0), ("malloc", "b", 3 * MIB, 0), ("malloc", "c", 1000, 0),
    ("free", "a"), ("free", "c"), ("malloc", "d", 18 * MIB, 0), ("malloc", "e", 700, 0),
]
# Then 30 MiB cannot fit even after the release: OutOfMemoryError, and the allocator still
# works afterwards.
OOM = [*RETRY, ("malloc", "f", 30 * MIB, 0), ("malloc", "g", 16 * MIB, 0),
       ("free", "d"), ("malloc", "h", 30 * MIB - 5, 1), ("malloc", "i", 40 * MIB, 0)]
# A block freed after record_stream, pending on stream 1's queued work, fills the device; the
# retry synchronizes, so it comes back to the cache and its segment is released.
PENDING = [
    ("malloc", "a", 24 * MIB, 0), ("record", "a", 1), ("launch", 1), ("free", "a"),
    ("malloc", "b", 24 * MIB, 0), ("malloc", "c", 30 * MIB, 0),
]

TRACES = TraceTests({"retry": (44 * MIB, RETRY), "oom": (44 * MIB, OOM),
                     "pending": (44 * MIB, PENDING)})
runs = TRACES.runs

test_retry_releases_exactly_the_unsplit_cached_segments = TRACES.test(4, "retry")
test_out_of_memory_error_reports_requested_allocated_reserved = TRACES.test(3, "oom")
test_retry_synchronizes_so_pending_blocks_are_released = TRACES.test(3, "pending")

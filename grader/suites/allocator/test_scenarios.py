"""Hand-written traces, each aimed at one rule of the policy (README §4–§5), judged operation
by operation against the reference model: best fit, the split thresholds of both pools,
coalescing, per-stream pools, record_stream, empty_cache, and bad arguments."""

from __future__ import annotations

from grader.suites.allocator._cases import TraceTests

MIB = 1 << 20
BASE = 1 << 40
ROOMY = 1 << 34


def ops_of(*steps: tuple) -> list[tuple]:
    return list(steps)


# Small pool: free blocks of 1024, 3072 and 2048 bytes between live ones; 2000 bytes must take
# the 2048 block (first fit would take 3072); two equal 4096 blocks: the lower address wins.
BEST_FIT_SMALL = ops_of(
    ("malloc", "a", 1024, 0), ("malloc", "b", 512, 0), ("malloc", "c", 3072, 0),
    ("malloc", "d", 512, 0), ("malloc", "e", 2048, 0), ("malloc", "f", 512, 0),
    ("malloc", "g", 4096, 0), ("malloc", "h", 512, 0), ("malloc", "i", 4096, 0),
    ("malloc", "j", 512, 0),
    ("free", "a"), ("free", "c"), ("free", "e"), ("free", "g"), ("free", "i"),
    ("malloc", "k", 2000, 0), ("malloc", "l", 4000, 0), ("malloc", "m", 3000, 0),
    ("malloc", "n", 900, 0), ("free", "k"), ("free", "l"), ("free", "m"), ("free", "n"),
)
# Large pool: cached 6 MiB, 4 MiB and 5 MiB holes in one 20 MiB segment and a 12 MiB segment.
BEST_FIT_LARGE = ops_of(
    ("malloc", "a", 6 * MIB, 0), ("malloc", "b", 2 * MIB, 0), ("malloc", "c", 4 * MIB, 0),
    ("malloc", "d", 2 * MIB, 0), ("malloc", "e", 5 * MIB, 0), ("malloc", "big", 12 * MIB, 0),
    ("free", "a"), ("free", "c"), ("free", "e"), ("free", "big"),
    ("malloc", "f", 4 * MIB + 1, 0), ("malloc", "g", 4 * MIB, 0), ("malloc", "h", 11 * MIB, 0),
)
SPLIT_SMALL = ops_of(
    ("malloc", "a", 2 * MIB - 512, 0),                 # the 512 B remainder is kept
    ("malloc", "b", 1, 0),                             # ... and serves the next tiny request
    ("malloc", "c", MIB, 0), ("malloc", "d", MIB, 0),  # a whole 2 MiB segment, in two halves
    ("free", "c"), ("malloc", "e", MIB - 100, 0),
)
SPLIT_LARGE = ops_of(
    ("malloc", "a", 19 * MIB, 0),                      # remainder exactly 1 MiB: not split
    ("malloc", "b", 18 * MIB + 1, 0),                  # remainder just under 2 MiB: split
    ("malloc", "c", 11 * MIB + 1, 0),                  # own 12 MiB segment, remainder < 1 MiB
    ("malloc", "d", 9 * MIB, 0), ("malloc", "e", MIB + 1, 0),
    ("free", "a"), ("malloc", "f", 2 * MIB, 0),        # a 20 MiB block split for 2 MiB
    ("free", "c"), ("malloc", "g", 10 * MIB, 0),       # a cached 12 MiB block, not split
)
COALESCE = ops_of(
    ("malloc", "a", 4096, 0), ("malloc", "b", 4096, 0), ("malloc", "c", 4096, 0),
    ("malloc", "d", 4096, 0),
    ("free", "a"), ("free", "c"), ("free", "b"),       # merges with both neighbours
    ("malloc", "e", 12 * 1024, 0),                     # fits the merged block exactly
    ("free", "d"), ("free", "e"), ("empty",),          # one free block: released
    ("malloc", "f", 3 * MIB, 0), ("malloc", "g", 3 * MIB, 0), ("malloc", "h", 3 * MIB, 0),
    ("free", "h"), ("free", "f"), ("free", "g"), ("empty",),
)
STREAMS = ops_of(
    ("malloc", "a", 5000, 0), ("free", "a"),
    ("malloc", "b", 5000, 1),                          # stream 1 gets its own segment
    ("malloc", "c", 5000, 0),                          # stream 0 reuses its cached block
    ("free", "b"), ("malloc", "d", 5000, 1),           # stream 1 reuses its own
    ("malloc", "e", 3 * MIB, 2), ("free", "e"), ("malloc", "f", 3 * MIB, 0),
    ("free", "c"), ("free", "d"), ("free", "f"), ("empty",),
)
RECORD_STREAM = ops_of(
    ("malloc", "a", 8192, 0), ("record", "a", 1), ("record", "a", 1), ("record", "a", 0),
    ("launch", 1), ("free", "a"),                      # pending: stream 1 may still use it
    ("malloc", "b", 8192, 0),                          # must not get a's block
    ("complete", 1), ("malloc", "c", 8192, 0),         # a's block is back and reused
    ("malloc", "d", 3 * MIB, 0), ("record", "d", 2), ("free", "d"),  # no work on 2: pending
    ("malloc", "e", 3 * MIB, 0),                       # ... until this malloc's step 1
    ("malloc", "f", 700, 0), ("record", "f", 1), ("record", "f", 2), ("launch", 1),
    ("launch", 2), ("free", "f"), ("complete", 2), ("malloc", "g", 700, 0),
    ("complete", 1), ("malloc", "h", 700, 0),
    ("malloc", "i", 700, 0), ("record", "i", 0), ("launch", 0), ("free", "i"),  # own stream
    ("malloc", "j", 700, 0),
)
EMPTY_CACHE = ops_of(
    ("malloc", "a", 3000, 0), ("malloc", "b", 3000, 0), ("free", "a"),  # split, in use: stays
    ("malloc", "c", 15 * MIB, 0), ("free", "c"),                        # unsplit free: released
    ("malloc", "d", 5000, 1), ("free", "d"),                            # another stream's too
    ("malloc", "e", 12 * MIB, 0), ("record", "e", 3), ("launch", 3), ("free", "e"),
    ("empty",),                                        # synchronize: e's segment released too
    ("free", "b"), ("empty",), ("empty",),
)
ERRORS = ops_of(
    ("malloc", "z", 0, 0), ("malloc", "n", -7, 0), ("malloc", "s", 100, -1),
    ("free_addr", BASE), ("malloc", "a", 1000, 0), ("free", "a"), ("free_addr", BASE),
    ("malloc", "b", 2000, 0), ("free_addr", BASE + 512), ("record_addr", BASE + 512, 1),
    ("record", "b", -1), ("record_addr", BASE + 4 * MIB, 1), ("free", "b"),
)

TRACES = TraceTests({
    "best_fit_small": (ROOMY, BEST_FIT_SMALL), "best_fit_large": (ROOMY, BEST_FIT_LARGE),
    "split_small": (ROOMY, SPLIT_SMALL), "split_large": (ROOMY, SPLIT_LARGE),
    "coalesce": (ROOMY, COALESCE), "streams": (ROOMY, STREAMS),
    "record_stream": (ROOMY, RECORD_STREAM), "empty_cache": (ROOMY, EMPTY_CACHE),
    "errors": (ROOMY, ERRORS),
})
runs = TRACES.runs

test_errors_for_bad_sizes_streams_and_pointers = TRACES.test(3, "errors")
test_split_thresholds_small_pool = TRACES.test(2, "split_small")
test_split_thresholds_large_pool = TRACES.test(3, "split_large")
test_best_fit_small_pool = TRACES.test(2, "best_fit_small")
test_best_fit_large_pool = TRACES.test(2, "best_fit_large")
test_coalesce_with_both_neighbours = TRACES.test(4, "coalesce")
test_each_stream_has_its_own_pools = TRACES.test(4, "streams")
test_record_stream_keeps_block_pending_until_events_complete = TRACES.test(4, "record_stream")
test_empty_cache_releases_only_unsplit_free_segments = TRACES.test(4, "empty_cache")

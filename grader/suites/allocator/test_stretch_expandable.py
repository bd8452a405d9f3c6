"""STRETCH — expandable segments (README §12): with `CachingAllocator(device,
expandable_segments=True)` each pool and stream has one segment, reserved once, that grows by
mapping whole 2 MiB pages at its end instead of asking the device for a new segment; a miss maps
only the pages the request lacks after the segment's free tail; `empty_cache` unmaps the whole
pages of each segment's free last block. Judged operation by operation against the reference
model (`_ref.Model(capacity, expandable=True)`); an allocator without the opt-in scores 0
here and nothing else changes."""

from __future__ import annotations

from grader.suites.allocator._cases import TraceTests

MIB = 1 << 20
ROOMY = 1 << 34

# Where the default policy adds segments (a 20 MiB one, then one per >= 10 MiB request, then a
# second 2 MiB small segment, another stream's), the expandable one grows one segment per pool
# and stream, by the pages the request lacks after the free tail.
GROW = [
    ("malloc", "a", 3 * MIB, 0),                       # maps 4 MiB: a holds all 4 (1 MiB rest)
    ("malloc", "b", 5 * MIB, 0),                       # tail allocated: 6 MiB more, not split
    ("malloc", "c", 12 * MIB + 1, 0),                  # 14 MiB more, split: free tail < 2 MiB
    ("malloc", "d", 3 * MIB, 0),                       # the tail lacks 1 MiB + 512: one page
    ("malloc", "e", 1000, 0), ("malloc", "f", MIB, 0), ("malloc", "g", MIB, 0),  # small pool
    ("malloc", "h", 5 * MIB, 1), ("malloc", "i", 700, 1),                         # stream 1
    ("free", "b"), ("malloc", "j", 4 * MIB, 0),        # best fit first: b's 6 MiB, not split
    ("free", "a"), ("free", "j"),                      # a and j coalesce (10 MiB, inactive)
    ("malloc", "k", 9 * MIB, 0),                       # split off it; no device call
    ("free", "d"), ("malloc", "l", 40 * MIB, 0),       # tail d + free rest grow by 38 MiB
    ("free", "e"), ("free", "f"), ("free", "g"), ("malloc", "m", 3 * MIB, 1),
]
# A step with fewer tokens, then one with more: the default policy adds segments beside the
# holes; here the holes are reused or the free tail grows. A block pending on another stream's
# work is never merged into a free neighbour.
FRAGMENT = [
    *[("malloc", f"s{k}", (4 + k) * MIB + 4096, 0) for k in range(4)],
    ("malloc", "keep", 2 * MIB, 0),
    *[("free", f"s{k}") for k in range(4)],
    *[("malloc", f"t{k}", (6 + k) * MIB, 0) for k in range(4)],
    ("free", "t1"), ("free", "t3"),
    ("malloc", "u", 10 * MIB, 0), ("malloc", "v", 6 * MIB + 512, 0),
    ("record", "keep", 1), ("launch", 1), ("malloc", "w", 3 * MIB, 0), ("free", "w"),
    ("free", "u"), ("free", "v"), ("free", "keep"),  # keep pending; u, v, w free before it
    ("malloc", "x", 30 * MIB, 0),                      # no fit: the free tail u grows by 20 MiB
    ("complete", 1), ("malloc", "y", 64 * MIB, 0),     # keep back (merged); y: a fresh block
    ("free", "t0"), ("free", "t2"), ("free", "x"), ("free", "y"),
]
# empty_cache unmaps the whole pages of each free last block, segments in address order: the
# part of a page that an allocated block shares stays mapped; a segment that is all free is
# unmapped whole (gone from the snapshot) and grows again at the same address; interior free
# blocks stay mapped; pending tails are unmapped after the synchronize.
EMPTY = [
    ("malloc", "a", 3 * MIB + 512, 0), ("malloc", "b", 7 * MIB, 0),
    ("free", "b"), ("empty",),                         # a's last page is shared: kept
    ("malloc", "c", 700, 0), ("malloc", "d", 1500, 0), ("free", "d"), ("empty",),
    ("malloc", "e", 6 * MIB, 1), ("free", "e"), ("empty",),  # stream 1: unmapped whole
    ("malloc", "f", 2 * MIB, 1),                       # ... and grown again at its base
    ("malloc", "g", 12 * MIB, 0), ("malloc", "h", 4 * MIB, 0), ("free", "g"),
    ("record", "h", 2), ("launch", 2), ("free", "h"), ("empty",),  # g interior, h the tail
    ("malloc", "p", 10 * MIB + 512, 3), ("malloc", "q", 4 * MIB, 3), ("free", "q"),
    ("empty",),                                        # the tail keeps its part below 12 MiB
    ("malloc", "r", 3 * MIB // 2, 3),                  # ... still cached: best fit takes it
    ("free", "p"), ("free", "r"),
    ("free", "a"), ("free", "c"), ("free", "f"), ("empty",), ("empty",),
]
# A full device: the retry empties the cache (unmapping free tails, other streams' included)
# and maps again, recomputing what the request lacks; when that fails, OutOfMemoryError.
TIGHT = [
    ("malloc", "a", 6 * MIB, 0), ("malloc", "b", 4 * MIB, 1), ("malloc", "c", 2 * MIB, 0),
    ("free", "b"), ("free", "c"),
    ("malloc", "d", 9 * MIB, 0),                       # lacks 7 MiB after c: 8 > 6 left
    ("malloc", "e", 8 * MIB + 100, 1),                 # 16 + 10 > 18 even after the retry
    ("free", "a"),
    ("malloc", "f", 12 * MIB, 0),                      # interior free a cannot be unmapped
    ("free", "d"), ("malloc", "g", 14 * MIB, 0), ("malloc", "h", 1000, 1),
]

TRACES = TraceTests({"grow": (ROOMY, GROW), "fragment": (ROOMY, FRAGMENT),
                     "empty": (ROOMY, EMPTY), "tight": (18 * MIB, TIGHT)}, expandable=True)
runs = TRACES.runs

test_expandable_segments_grow_instead_of_adding_segments = TRACES.test(3, "grow")
test_expandable_segments_reuse_holes_and_grow_the_free_tail = TRACES.test(2, "fragment")
test_expandable_segments_empty_cache_unmaps_free_tail_pages = TRACES.test(2, "empty")
test_expandable_segments_out_of_memory_retry_unmaps_then_maps = TRACES.test(1, "tight")

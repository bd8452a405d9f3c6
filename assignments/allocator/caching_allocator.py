"""A caching allocator over the fake device, with the policy of PyTorch's CUDA caching allocator.

You implement the three size rules (`round_size`, `allocation_size`, `should_split`, README §3)
and `CachingAllocator` (README §4–§6) over `assignments.allocator.device.FakeDevice`.
STRETCH (optional, README §12): `CachingAllocator(device, expandable_segments=True)`, one
segment per pool and stream that grows by mapping 2 MiB pages (see `__init__`); the default
(False) is the policy of §4–§6 alone.

Vocabulary used below (README §2):
- a *segment* is what one `device.malloc` returned; it is carved into *blocks* that tile it
  (adjacent, no gaps, no overlaps), each in one state: `"allocated"` (handed out by `malloc`
  and not yet freed), `"pending"` (freed by the caller, but another stream may still be using
  it: see `record_stream`) or `"free"` (cached, ready to be handed out again);
- a segment belongs to one *pool* and one *stream*: the small pool when its first request was
  at most `SMALL_SIZE` after rounding (its segments are exactly `SMALL_BUFFER` bytes), else the
  large pool; and the stream that request named. Its blocks keep that pool and stream;
- *best fit*: among the free blocks of the request's pool and stream whose size is at least the
  rounded request, the smallest; between equal sizes, the lowest address.

Errors, everywhere: `ValueError` for a size < 1, a stream < 0, or a pointer that is not the
address of an allocated block (unknown, already freed, or inside a block), raised before
anything changes; `OutOfMemoryError` when the device cannot give the segment even after the
cache was emptied (README §5).
"""

from __future__ import annotations

from typing import Any

from assignments.allocator.device import FakeDevice

MIB = 1 << 20
MIN_BLOCK_SIZE = 512        # kMinBlockSize: every block size is a multiple of this
SMALL_SIZE = 1 * MIB        # kSmallSize: rounded requests up to this go to the small pool
SMALL_BUFFER = 2 * MIB      # kSmallBuffer: the size of every small-pool segment
LARGE_BUFFER = 20 * MIB     # kLargeBuffer: the segment for a large request below MIN_LARGE_ALLOC
MIN_LARGE_ALLOC = 10 * MIB  # kMinLargeAlloc: from here a request gets a segment of its own size
ROUND_LARGE = 2 * MIB       # kRoundLarge: ... rounded up to a multiple of this

STAT_KEYS = ("allocated_bytes", "reserved_bytes", "peak_allocated_bytes", "peak_reserved_bytes",
             "inactive_split_bytes", "num_device_mallocs", "num_device_frees",
             "num_alloc_retries", "num_ooms")


class OutOfMemoryError(RuntimeError):
    """The device could not give the segment a request needs, even after the cache was emptied.

    Attributes: `requested_bytes` (the size the caller passed to `malloc`, not rounded),
    `allocated_bytes` and `reserved_bytes` (the allocator's statistics when it gave up, after
    the release). The message contains the three numbers as plain decimal integers.
    """

    def __init__(self, requested_bytes: int, allocated_bytes: int, reserved_bytes: int) -> None:
        super().__init__(
            f"out of memory: tried to allocate {requested_bytes} bytes; {allocated_bytes} bytes "
            f"allocated, {reserved_bytes} bytes reserved by the caching allocator")
        self.requested_bytes = requested_bytes
        self.allocated_bytes = allocated_bytes
        self.reserved_bytes = reserved_bytes


def round_size(size: int) -> int:
    """The block size a request of `size` bytes gets: the smallest multiple of 512 that is
    >= `size` (so 1 -> 512, 512 -> 512, 513 -> 1024). ValueError when `size` < 1."""
    raise NotImplementedError("round_size: see README §3")


def allocation_size(rounded: int) -> int:
    """The size of the segment to ask the device for when no cached block fits a request of
    `rounded` bytes (already rounded by `round_size`):
    - `rounded <= SMALL_SIZE` (small pool): `SMALL_BUFFER` (2 MiB);
    - `SMALL_SIZE < rounded < MIN_LARGE_ALLOC`: `LARGE_BUFFER` (20 MiB);
    - otherwise: `rounded` rounded up to a multiple of `ROUND_LARGE` (2 MiB).
    """
    raise NotImplementedError("allocation_size: see README §3")


def should_split(block_size: int, rounded: int, is_small_pool: bool) -> bool:
    """Whether a free block of `block_size` bytes chosen for a request of `rounded` bytes is
    split in two (the request takes the lower `rounded` bytes, the remainder stays cached):
    in the small pool when the remainder `block_size - rounded` is >= `MIN_BLOCK_SIZE`, in the
    large pool when it is > `SMALL_SIZE`. Otherwise the request gets the whole block."""
    raise NotImplementedError("should_split: see README §3")


class CachingAllocator:
    """Hands out device memory from cached segments; calls the device only on a cache miss.

    Policy of `malloc(size, stream)`, in this order (README §4):
    1. Return to the cache every pending block whose events have all completed (each one is
       coalesced like a `free`, step F below).
    2. `rounded = round_size(size)`; the pool is small when `rounded <= SMALL_SIZE`.
    3. Best fit among the free blocks of that pool and stream. If there is one, split it when
       `should_split` says so and hand out the lower part; done.
    4. Else `device.malloc(allocation_size(rounded))`; the new segment (of this pool and
       stream) is one block, split and handed out as in 3.
    5. If the device raised `DeviceOutOfMemory`: count a retry (`num_alloc_retries`), empty the
       cache exactly as `empty_cache` does, and call `device.malloc` once more with the same
       size (the cache is not searched again). If that raises too, count it (`num_ooms`) and
       raise `OutOfMemoryError(size, allocated_bytes, reserved_bytes)`; the cache stays empty
       and no block was handed out.

    F. A block goes back to the cache (on `free` without recorded streams, or when its events
       complete) as a free block, merged with the block just before it and the one just after
       it in the same segment when those are free (never with pending or allocated ones).

    Statistics (`stats()`, all ints, README §6): `allocated_bytes` (sizes of the blocks in
    state "allocated"; a block handed out whole counts its whole size), `reserved_bytes` (sizes
    of the segments held), `peak_allocated_bytes` and `peak_reserved_bytes` (the largest values
    those two have had since construction), `inactive_split_bytes` (sizes of the free blocks
    that are not a whole segment), `num_device_mallocs` (successful `device.malloc` calls),
    `num_device_frees` (`device.free` calls), `num_alloc_retries`, `num_ooms`.
    """

    def __init__(self, device: FakeDevice, expandable_segments: bool = False) -> None:
        """An empty cache over `device`; no device call is made.

        STRETCH (README §12, optional; the default False is the policy above, unchanged).
        With `expandable_segments=True` (PyTorch's `expandable_segments:True`) every pool and
        stream has at most one segment, which grows instead of new segments being added. Only
        steps 4 and 5 and `empty_cache` change; best fit, splitting, coalescing, pending
        blocks and the statistics' definitions stay as above:
        4'. The first time a (pool, stream) needs memory, reserve its address range:
            `base = device.reserve(max(PAGE_SIZE, device.capacity rounded up to PAGE_SIZE))`
            (`PAGE_SIZE` = 2 MiB from `device.py`). Let `tail` be the segment's last block and
            `end` the segment's end (`base` while nothing is mapped). `have` = the size of
            `tail` if it is free, else 0. Call `device.map(end, grow)` once with
            `grow = PAGE_SIZE * ceil((rounded - have) / PAGE_SIZE)`. A free `tail` grows by
            `grow` bytes; otherwise the new pages are a new last block `[end, end + grow)`.
            That block is split (`should_split`) and its lower part handed out as in step 3.
        5'. `device.map` raised `DeviceOutOfMemory`: count a retry, `empty_cache()`, then do
            step 4' once more from the start (the tail may have been unmapped, so `grow` is
            computed again). If it raises too: count it and raise `OutOfMemoryError` as in 5.
        `empty_cache()`: `device.synchronize()`, pending blocks back (step F), then for every
        segment in increasing address order whose last block is free: `device.unmap` the
        whole pages inside that block (from its address rounded up to `PAGE_SIZE` to the
        segment's end), once, if there is at least one; the block shrinks to what is left
        before that page boundary, and disappears when nothing is left. Free blocks that are
        not last stay mapped. A segment with no mapped bytes is left out of `snapshot()`, and
        later grows again from `base` (it is never reserved twice).
        Statistics: a segment is the mapped part `[base, end)`; `reserved_bytes` = mapped
        bytes (equals `device.used_bytes`); `num_device_mallocs` counts successful
        `device.map` calls, `num_device_frees` `device.unmap` calls. No `device.malloc` or
        `device.free` is ever called in this mode."""
        raise NotImplementedError("CachingAllocator.__init__: see README §4")

    def malloc(self, size: int, stream: int = 0) -> int:
        """Allocate at least `size` bytes for use on `stream`; return the block's address (a
        multiple of 512). The policy is the class docstring's steps 1–5. Raises ValueError for
        `size < 1` or `stream < 0`, OutOfMemoryError as in step 5."""
        raise NotImplementedError("CachingAllocator.malloc: see README §4")

    def free(self, ptr: int) -> None:
        """Give back the block at `ptr` (an address `malloc` returned and not yet freed).

        `allocated_bytes` drops by the block's size at once. If `record_stream` named other
        streams for it, record one event on each of them (`device.record_event`, streams in
        increasing order) and leave the block "pending" until `malloc` step 1 or `empty_cache`
        finds them all completed; else return it to the cache now (step F). Makes no other
        device call. ValueError for any other `ptr`."""
        raise NotImplementedError("CachingAllocator.free: see README §5")

    def record_stream(self, ptr: int, stream: int) -> None:
        """Note that the allocated block at `ptr` is also used by work queued on `stream`, so
        `free` must not hand it out again before that work is done. Naming the block's own
        stream, or a stream already noted, changes nothing. ValueError for a `ptr` that is not
        an allocated block, or `stream < 0`."""
        raise NotImplementedError("CachingAllocator.record_stream: see README §5")

    def empty_cache(self) -> None:
        """Release what the cache can give back: call `device.synchronize()`, return every
        pending block to the cache (all its events have now completed; step F), then
        `device.free` every segment that is one free block (an *unsplit* free segment), in
        increasing address order. Segments holding allocated blocks stay; so do their free
        blocks."""
        raise NotImplementedError("CachingAllocator.empty_cache: see README §5")

    def stats(self) -> dict[str, int]:
        """The statistics named in `STAT_KEYS` (class docstring), as a new dict. Changes
        nothing (pending blocks are not processed here)."""
        raise NotImplementedError("CachingAllocator.stats: see README §6")

    def snapshot(self) -> list[dict[str, Any]]:
        """Every segment held, in increasing address order, as a dict:
        `{"address": int, "size": int, "stream": int, "pool": "small" | "large",
        "blocks": [{"address": int, "size": int, "state": "allocated" | "pending" | "free"},
        ...]}` with the blocks in increasing address order. Changes nothing."""
        raise NotImplementedError("CachingAllocator.snapshot: see README §6")

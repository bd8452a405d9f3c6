"""Reference solution: a caching allocator with the policy of PyTorch's CUDA caching allocator.

The constants and rules follow c10/cuda/CUDACachingAllocator.cpp (round_size,
get_allocation_size, should_split, get_free_block, free_block, release_cached_blocks).

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
address of an allocated block (unknown, already freed, or inside a block); `OutOfMemoryError`
when the device cannot give the segment even after the cache was emptied (README §5).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from assignments.allocator.device import PAGE_SIZE, DeviceOutOfMemory, Event, FakeDevice

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
    """The smallest multiple of 512 that is >= `size`."""
    if size < 1:
        raise ValueError(f"malloc size must be >= 1 byte, got {size}")
    # Blocks are 512-aligned so that any split leaves both halves aligned for any dtype.
    return -(-size // MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE


def allocation_size(rounded: int) -> int:
    """The segment size asked of the device for a request of `rounded` bytes."""
    # Small tensors share 2 MiB segments, mid-size ones share 20 MiB segments: one device call
    # serves many requests. Big ones get a segment of their own, rounded to 2 MiB.
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-rounded // ROUND_LARGE) * ROUND_LARGE


def should_split(block_size: int, rounded: int, is_small_pool: bool) -> bool:
    """Whether the remainder of a block chosen for `rounded` bytes is worth keeping."""
    remaining = block_size - rounded
    # A small-pool sliver of 512 B can still serve a small tensor; in the large pool only a
    # remainder that could not be served by the small pool (> 1 MiB) is worth a block.
    if is_small_pool:
        return remaining >= MIN_BLOCK_SIZE
    return remaining > SMALL_SIZE


@dataclass(eq=False)
class _Block:
    """One block of a segment; `prev`/`next` link the blocks of the segment in address order."""

    address: int
    size: int
    stream: int
    is_small: bool
    segment: int                      # address of the segment it belongs to
    state: str = "free"               # "allocated" | "pending" | "free"
    prev: _Block | None = None
    next: _Block | None = None
    stream_uses: set[int] = field(default_factory=set)
    events: list[Event] = field(default_factory=list)

    @property
    def is_whole_segment(self) -> bool:
        return self.prev is None and self.next is None

    def key(self) -> tuple[int, int]:
        return (self.size, self.address)


class CachingAllocator:
    """Hands out device memory from cached segments; calls the device only on a cache miss."""

    def __init__(self, device: FakeDevice, expandable_segments: bool = False) -> None:
        self.device = device
        # STRETCH (README §12): one growing segment per (pool, stream) instead of many.
        self._expandable = expandable_segments
        self._reservations: dict[tuple[bool, int], int] = {}  # (small?, stream) -> base address
        # One pool per (small?, stream): a sorted list of (size, address) keys, so best fit is a
        # bisect. PyTorch keeps a std::set ordered by (stream, size, address) per pool.
        self._pools: dict[tuple[bool, int], list[tuple[int, int]]] = {}
        self._free_blocks: dict[int, _Block] = {}     # address -> free block
        self._allocated: dict[int, _Block] = {}       # address -> allocated block
        self._pending: list[_Block] = []              # freed, waiting for their events
        self._segments: dict[int, _Block] = {}        # segment address -> its first block
        self._stats = dict.fromkeys(STAT_KEYS, 0)

    # -- the cache ---------------------------------------------------------------------------
    def _pool(self, block: _Block) -> list[tuple[int, int]]:
        return self._pools.setdefault((block.is_small, block.stream), [])

    def _cache(self, block: _Block) -> None:
        block.state = "free"
        bisect.insort(self._pool(block), block.key())
        self._free_blocks[block.address] = block
        if not block.is_whole_segment:
            self._stats["inactive_split_bytes"] += block.size

    def _uncache(self, block: _Block) -> None:
        pool = self._pool(block)
        del pool[bisect.bisect_left(pool, block.key())]
        del self._free_blocks[block.address]
        if not block.is_whole_segment:
            self._stats["inactive_split_bytes"] -= block.size

    def _best_fit(self, rounded: int, is_small: bool, stream: int) -> _Block | None:
        # The first key >= (rounded, 0) is the smallest block that fits, lowest address first.
        pool = self._pools.get((is_small, stream), [])
        i = bisect.bisect_left(pool, (rounded, 0))
        return self._free_blocks[pool[i][1]] if i < len(pool) else None

    def _return_to_cache(self, block: _Block) -> None:
        """Step F: merge with free neighbours of the same segment, then cache the result."""
        # Coalescing undoes earlier splits, so a segment whose blocks are all free becomes one
        # block again and empty_cache can give it back to the device.
        for neighbour in (block.prev, block.next):
            if neighbour is not None and neighbour.state == "free":
                self._uncache(neighbour)
                self._merge(block, neighbour)
        self._cache(block)

    def _merge(self, block: _Block, neighbour: _Block) -> None:
        if neighbour is block.prev:
            block.address, block.prev = neighbour.address, neighbour.prev
            if block.prev is not None:
                block.prev.next = block
            else:
                self._segments[block.segment] = block
        else:
            block.next = neighbour.next
            if block.next is not None:
                block.next.prev = block
        block.size += neighbour.size

    def _process_events(self) -> None:
        """Step 1: pending blocks whose events all completed go back to the cache."""
        still_pending = []
        for block in self._pending:
            if all(event.query() for event in block.events):
                block.events = []
                self._return_to_cache(block)
            else:
                still_pending.append(block)
        self._pending = still_pending

    # -- the public API ----------------------------------------------------------------------
    def malloc(self, size: int, stream: int = 0) -> int:
        if stream < 0:
            raise ValueError(f"stream must be >= 0, got {stream}")
        rounded = round_size(size)
        self._process_events()
        is_small = rounded <= SMALL_SIZE
        block = self._best_fit(rounded, is_small, stream)
        if block is not None:
            self._uncache(block)
        elif self._expandable:
            block = self._grow(size, rounded, is_small, stream)
        else:
            block = self._new_segment(size, rounded, is_small, stream)
        if should_split(block.size, rounded, is_small):
            self._split(block, rounded)
        block.state = "allocated"
        self._allocated[block.address] = block
        self._stats["allocated_bytes"] += block.size
        self._update_peaks()
        return block.address

    def _new_segment(self, size: int, rounded: int, is_small: bool, stream: int) -> _Block:
        """Steps 4 and 5: a segment from the device, emptying the cache once if it is full."""
        segment_size = allocation_size(rounded)
        try:
            address = self.device.malloc(segment_size)
        except DeviceOutOfMemory:
            # Cached but unused segments are the only memory we can give back without breaking
            # a caller; PyTorch does the same before it reports OOM.
            self._stats["num_alloc_retries"] += 1
            self.empty_cache()
            try:
                address = self.device.malloc(segment_size)
            except DeviceOutOfMemory:
                self._stats["num_ooms"] += 1
                raise OutOfMemoryError(size, self._stats["allocated_bytes"],
                                       self._stats["reserved_bytes"]) from None
        self._stats["num_device_mallocs"] += 1
        self._stats["reserved_bytes"] += segment_size
        block = _Block(address, segment_size, stream, is_small, segment=address)
        self._segments[address] = block
        return block

    # -- STRETCH: expandable segments (README §12) --------------------------------------------
    def _grow(self, size: int, rounded: int, is_small: bool, stream: int) -> _Block:
        """Steps 4 and 5 with expandable segments: map pages at the end of the (pool, stream)
        segment, emptying the cache once if the device is full."""
        try:
            return self._map_more(rounded, is_small, stream)
        except DeviceOutOfMemory:
            self._stats["num_alloc_retries"] += 1
            self.empty_cache()
            try:
                return self._map_more(rounded, is_small, stream)
            except DeviceOutOfMemory:
                self._stats["num_ooms"] += 1
                raise OutOfMemoryError(size, self._stats["allocated_bytes"],
                                       self._stats["reserved_bytes"]) from None

    def _last_block(self, base: int) -> _Block | None:
        block = self._segments.get(base)
        while block is not None and block.next is not None:
            block = block.next
        return block

    def _map_more(self, rounded: int, is_small: bool, stream: int) -> _Block:
        """Map the pages the request lacks after the segment's free tail; the block to hand
        out (the grown tail, or a new last block). Raises DeviceOutOfMemory, changing nothing
        but the reservation."""
        key = (is_small, stream)
        if key not in self._reservations:
            # Like PyTorch, reserve address space for the whole device at once: the segment can
            # then grow up to the capacity without ever moving.
            span = max(PAGE_SIZE, -(-self.device.capacity // PAGE_SIZE) * PAGE_SIZE)
            self._reservations[key] = self.device.reserve(span)
        base = self._reservations[key]
        tail = self._last_block(base)
        end = tail.address + tail.size if tail is not None else base
        have = tail.size if tail is not None and tail.state == "free" else 0
        grow = -(-(rounded - have) // PAGE_SIZE) * PAGE_SIZE
        self.device.map(end, grow)
        self._stats["num_device_mallocs"] += 1
        self._stats["reserved_bytes"] += grow
        if tail is not None and have:
            self._uncache(tail)
            tail.size += grow
            return tail
        block = _Block(end, grow, stream, is_small, segment=base, prev=tail)
        if tail is not None:
            tail.next = block
        else:
            self._segments[base] = block
        return block

    def _unmap_free_tails(self) -> None:
        """empty_cache with expandable segments: unmap the whole pages of each segment's free
        last block, segments in increasing address order."""
        for base in sorted(self._segments):
            tail = self._last_block(base)
            assert tail is not None
            if tail.state != "free":
                continue
            cut = -(-tail.address // PAGE_SIZE) * PAGE_SIZE
            end = tail.address + tail.size
            if cut >= end:
                continue
            self._uncache(tail)
            self.device.unmap(cut, end - cut)
            self._stats["num_device_frees"] += 1
            self._stats["reserved_bytes"] -= end - cut
            tail.size = cut - tail.address
            if tail.size:
                self._cache(tail)
            elif tail.prev is not None:
                tail.prev.next = None
            else:
                del self._segments[base]

    def _split(self, block: _Block, rounded: int) -> None:
        """Keep the lower `rounded` bytes in `block`; cache the rest as a new free block."""
        rest = _Block(block.address + rounded, block.size - rounded, block.stream,
                      block.is_small, block.segment, prev=block, next=block.next)
        if block.next is not None:
            block.next.prev = rest
        block.next, block.size = rest, rounded
        self._cache(rest)

    def _update_peaks(self) -> None:
        stats = self._stats
        stats["peak_allocated_bytes"] = max(stats["peak_allocated_bytes"],
                                            stats["allocated_bytes"])
        stats["peak_reserved_bytes"] = max(stats["peak_reserved_bytes"], stats["reserved_bytes"])

    def _allocated_block(self, ptr: int) -> _Block:
        block = self._allocated.get(ptr)
        if block is None:
            raise ValueError(f"{ptr!r} is not the address of an allocated block (unknown, "
                             f"already freed, or inside a block)")
        return block

    def free(self, ptr: int) -> None:
        block = self._allocated_block(ptr)
        del self._allocated[ptr]
        self._stats["allocated_bytes"] -= block.size
        if block.stream_uses:
            # Another stream may still read or write this memory: handing it to a kernel on the
            # block's own stream now would race. An event per stream marks when it is safe.
            block.events = [self.device.record_event(s) for s in sorted(block.stream_uses)]
            block.stream_uses = set()
            block.state = "pending"
            self._pending.append(block)
        else:
            self._return_to_cache(block)

    def record_stream(self, ptr: int, stream: int) -> None:
        block = self._allocated_block(ptr)
        if stream < 0:
            raise ValueError(f"stream must be >= 0, got {stream}")
        if stream != block.stream:
            block.stream_uses.add(stream)

    def empty_cache(self) -> None:
        # Synchronising first turns every pending block into a free one (as PyTorch's
        # synchronize_and_free_events does); device.free would wait for the work anyway.
        self.device.synchronize()
        self._process_events()
        if self._expandable:
            self._unmap_free_tails()
            return
        for address in sorted(self._segments):
            block = self._segments[address]
            if block.state == "free" and block.is_whole_segment:
                self._uncache(block)
                del self._segments[address]
                self.device.free(address)
                self._stats["num_device_frees"] += 1
                self._stats["reserved_bytes"] -= block.size

    def stats(self) -> dict[str, int]:
        return dict(self._stats)

    def snapshot(self) -> list[dict[str, Any]]:
        segments = []
        for address in sorted(self._segments):
            block: _Block | None = self._segments[address]
            blocks = []
            total, first = 0, block
            while block is not None:
                blocks.append({"address": block.address, "size": block.size,
                               "state": block.state})
                total += block.size
                block = block.next
            assert first is not None
            segments.append({"address": address, "size": total, "stream": first.stream,
                             "pool": "small" if first.is_small else "large", "blocks": blocks})
        return segments

"""Independent implementation of the allocator assignment (fairness check).

Written from README §3-§6 and the stub's docstrings only. Layout differs from the obvious
linked-list-per-segment design: every block lives in two address-keyed maps (by its start and
by its end), so neighbours are found by address arithmetic and checked to share the segment;
each (pool, stream) keeps a sorted list of `(size, address)` keys for best fit via bisect.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import Any

from assignments.allocator.device import DeviceOutOfMemory, FakeDevice

MIB = 1 << 20
MIN_BLOCK_SIZE = 512
SMALL_SIZE = 1 * MIB
SMALL_BUFFER = 2 * MIB
LARGE_BUFFER = 20 * MIB
MIN_LARGE_ALLOC = 10 * MIB
ROUND_LARGE = 2 * MIB

STAT_KEYS = ("allocated_bytes", "reserved_bytes", "peak_allocated_bytes", "peak_reserved_bytes",
             "inactive_split_bytes", "num_device_mallocs", "num_device_frees",
             "num_alloc_retries", "num_ooms")

_ALLOCATED, _PENDING, _FREE = "allocated", "pending", "free"


class OutOfMemoryError(RuntimeError):
    """The device refused the segment even after the cache was emptied."""

    def __init__(self, requested_bytes: int, allocated_bytes: int, reserved_bytes: int) -> None:
        super().__init__(
            f"out of memory: tried to allocate {requested_bytes} bytes; {allocated_bytes} bytes "
            f"allocated, {reserved_bytes} bytes reserved by the caching allocator")
        self.requested_bytes = requested_bytes
        self.allocated_bytes = allocated_bytes
        self.reserved_bytes = reserved_bytes


def _ceil_to(value: int, step: int) -> int:
    return -(-value // step) * step


def round_size(size: int) -> int:
    """Smallest multiple of 512 that is >= size; ValueError for size < 1."""
    if size < 1:
        raise ValueError(f"round_size: size must be >= 1, got {size}")
    return _ceil_to(size, MIN_BLOCK_SIZE)


def allocation_size(rounded: int) -> int:
    """Segment size for a miss of `rounded` bytes."""
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return _ceil_to(rounded, ROUND_LARGE)


def should_split(block_size: int, rounded: int, is_small_pool: bool) -> bool:
    """Split when the remainder is worth keeping: >= 512 B (small), > 1 MiB (large)."""
    rest = block_size - rounded
    return rest >= MIN_BLOCK_SIZE if is_small_pool else rest > SMALL_SIZE


class _Segment:
    __slots__ = ("addr", "size", "stream", "small")

    def __init__(self, addr: int, size: int, stream: int, small: bool) -> None:
        self.addr, self.size, self.stream, self.small = addr, size, stream, small


class _Block:
    __slots__ = ("addr", "size", "state", "seg", "users", "events")

    def __init__(self, addr: int, size: int, seg: _Segment) -> None:
        self.addr, self.size, self.seg = addr, size, seg
        self.state = _FREE
        self.users: set[int] = set()
        self.events: list[Any] = []

    @property
    def end(self) -> int:
        return self.addr + self.size


class CachingAllocator:
    """PyTorch's caching policy over the fake device (README §4-§6)."""

    def __init__(self, device: FakeDevice) -> None:
        self._dev = device
        self._segments: dict[int, _Segment] = {}
        self._at_start: dict[int, _Block] = {}
        self._at_end: dict[int, _Block] = {}
        self._cached: dict[tuple[bool, int], list[tuple[int, int]]] = {}
        self._waiting: dict[int, _Block] = {}
        self._n = dict.fromkeys(STAT_KEYS, 0)

    # ---- block bookkeeping ---------------------------------------------------------------

    def _index(self, blk: _Block) -> None:
        self._at_start[blk.addr] = blk
        self._at_end[blk.end] = blk

    def _unindex(self, blk: _Block) -> None:
        del self._at_start[blk.addr]
        del self._at_end[blk.end]

    def _cache_key(self, blk: _Block) -> tuple[bool, int]:
        return (blk.seg.small, blk.seg.stream)

    def _cache_add(self, blk: _Block) -> None:
        insort(self._cached.setdefault(self._cache_key(blk), []), (blk.size, blk.addr))

    def _cache_drop(self, blk: _Block) -> None:
        keys = self._cached[self._cache_key(blk)]
        i = bisect_left(keys, (blk.size, blk.addr))
        del keys[i]

    def _neighbour(self, blk: _Block, before: bool) -> _Block | None:
        other = self._at_end.get(blk.addr) if before else self._at_start.get(blk.end)
        if other is None or other.seg is not blk.seg or other.state != _FREE:
            return None
        return other

    def _recycle(self, blk: _Block) -> None:
        """Step F: the block becomes free and absorbs free neighbours in its segment."""
        blk.users.clear()
        blk.events = []
        self._unindex(blk)
        lo = self._neighbour(blk, before=True)
        hi = self._neighbour(blk, before=False)
        start, stop = blk.addr, blk.end
        for nb in (lo, hi):
            if nb is not None:
                self._cache_drop(nb)
                self._unindex(nb)
                start, stop = min(start, nb.addr), max(stop, nb.end)
        merged = _Block(start, stop - start, blk.seg)
        self._index(merged)
        self._cache_add(merged)

    def _reap(self, force: bool) -> None:
        done = [b for b in self._waiting.values()
                if force or all(ev.query() for ev in b.events)]
        for blk in done:
            del self._waiting[blk.addr]
            self._recycle(blk)

    def _release_whole_segments(self) -> None:
        self._dev.synchronize()
        self._reap(force=True)
        for addr in sorted(self._segments):
            seg = self._segments[addr]
            blk = self._at_start.get(addr)
            if blk is None or blk.state != _FREE or blk.size != seg.size:
                continue
            self._dev.free(addr)
            self._n["num_device_frees"] += 1
            self._cache_drop(blk)
            self._unindex(blk)
            del self._segments[addr]
            self._n["reserved_bytes"] -= seg.size

    def _grab(self, rounded: int, small: bool, stream: int, requested: int) -> _Block:
        want = allocation_size(rounded)
        try:
            addr = self._dev.malloc(want)
        except DeviceOutOfMemory:
            self._n["num_alloc_retries"] += 1
            self._release_whole_segments()
            try:
                addr = self._dev.malloc(want)
            except DeviceOutOfMemory:
                self._n["num_ooms"] += 1
                raise OutOfMemoryError(requested, self._n["allocated_bytes"],
                                       self._n["reserved_bytes"]) from None
        self._n["num_device_mallocs"] += 1
        seg = _Segment(addr, want, stream, small)
        self._segments[addr] = seg
        self._n["reserved_bytes"] += want
        self._n["peak_reserved_bytes"] = max(self._n["peak_reserved_bytes"],
                                             self._n["reserved_bytes"])
        blk = _Block(addr, want, seg)
        self._index(blk)
        return blk

    def _allocated_block(self, ptr: int) -> _Block:
        blk = self._at_start.get(ptr) if isinstance(ptr, int) else None
        if blk is None or blk.state != _ALLOCATED:
            raise ValueError(f"{ptr!r} is not the address of an allocated block")
        return blk

    # ---- public API ----------------------------------------------------------------------

    def malloc(self, size: int, stream: int = 0) -> int:
        if size < 1:
            raise ValueError(f"malloc: size must be >= 1, got {size}")
        if stream < 0:
            raise ValueError(f"malloc: stream must be >= 0, got {stream}")
        self._reap(force=False)
        rounded = round_size(size)
        small = rounded <= SMALL_SIZE
        keys = self._cached.get((small, stream), [])
        i = bisect_left(keys, (rounded, -1))
        if i < len(keys):
            _, addr = keys.pop(i)
            blk = self._at_start[addr]
        else:
            blk = self._grab(rounded, small, stream, size)
        if should_split(blk.size, rounded, small):
            self._unindex(blk)
            rest = _Block(blk.addr + rounded, blk.size - rounded, blk.seg)
            blk.size = rounded
            self._index(blk)
            self._index(rest)
            self._cache_add(rest)
        blk.state = _ALLOCATED
        self._n["allocated_bytes"] += blk.size
        self._n["peak_allocated_bytes"] = max(self._n["peak_allocated_bytes"],
                                              self._n["allocated_bytes"])
        return blk.addr

    def free(self, ptr: int) -> None:
        blk = self._allocated_block(ptr)
        self._n["allocated_bytes"] -= blk.size
        if not blk.users:
            self._recycle(blk)
            return
        blk.events = [self._dev.record_event(s) for s in sorted(blk.users)]
        blk.state = _PENDING
        self._waiting[blk.addr] = blk

    def record_stream(self, ptr: int, stream: int) -> None:
        if stream < 0:
            raise ValueError(f"record_stream: stream must be >= 0, got {stream}")
        blk = self._allocated_block(ptr)
        if stream != blk.seg.stream:
            blk.users.add(stream)

    def empty_cache(self) -> None:
        self._release_whole_segments()

    def stats(self) -> dict[str, int]:
        out = dict(self._n)
        out["inactive_split_bytes"] = sum(
            b.size for b in self._at_start.values()
            if b.state == _FREE and b.size != b.seg.size)
        return out

    def snapshot(self) -> list[dict[str, Any]]:
        per_seg: dict[int, list[_Block]] = {a: [] for a in self._segments}
        for blk in self._at_start.values():
            per_seg[blk.seg.addr].append(blk)
        return [{"address": seg.addr, "size": seg.size, "stream": seg.stream,
                 "pool": "small" if seg.small else "large",
                 "blocks": [{"address": b.addr, "size": b.size, "state": b.state}
                            for b in sorted(per_seg[addr], key=lambda b: b.addr)]}
                for addr, seg in sorted(self._segments.items())]

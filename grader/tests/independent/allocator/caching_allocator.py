"""An independent caching allocator, written from the stub's docstrings and the README only.

Every block lives in one dict keyed by address; a block records its segment, so neighbours are
found by address arithmetic (the block ending where this one starts, the block starting where
this one ends). Best fit is a linear scan: simple, and enough for the traces of a course.
"""

from __future__ import annotations

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


class OutOfMemoryError(RuntimeError):
    """The device could not give the segment a request needs, even after the cache was emptied."""

    def __init__(self, requested_bytes: int, allocated_bytes: int, reserved_bytes: int) -> None:
        super().__init__(
            f"out of memory: tried to allocate {requested_bytes} bytes; {allocated_bytes} bytes "
            f"allocated, {reserved_bytes} bytes reserved by the caching allocator")
        self.requested_bytes = requested_bytes
        self.allocated_bytes = allocated_bytes
        self.reserved_bytes = reserved_bytes


def _ceil_to(value: int, step: int) -> int:
    return (value + step - 1) // step * step


def round_size(size: int) -> int:
    """The smallest multiple of 512 that is >= size."""
    if size < 1:
        raise ValueError(f"size must be at least 1, got {size}")
    return _ceil_to(size, MIN_BLOCK_SIZE)


def allocation_size(rounded: int) -> int:
    """Segment size for a request of `rounded` bytes."""
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return _ceil_to(rounded, ROUND_LARGE)


def should_split(block_size: int, rounded: int, is_small_pool: bool) -> bool:
    """Whether the remainder is kept as a block of its own."""
    left = block_size - rounded
    return left >= MIN_BLOCK_SIZE if is_small_pool else left > SMALL_SIZE


class CachingAllocator:
    """Caching allocator over a FakeDevice (policy: README §4–§6)."""

    def __init__(self, device: FakeDevice) -> None:
        self._dev = device
        # address -> {"size", "state", "seg", "uses": set, "events": list}
        self._blocks: dict[int, dict[str, Any]] = {}
        # segment address -> {"size", "stream", "small"}
        self._segs: dict[int, dict[str, Any]] = {}
        self._counts = {"num_device_mallocs": 0, "num_device_frees": 0,
                        "num_alloc_retries": 0, "num_ooms": 0}
        self._peak_alloc = 0
        self._peak_res = 0

    # -- books -------------------------------------------------------------------------------
    def _allocated(self) -> int:
        return sum(b["size"] for b in self._blocks.values() if b["state"] == "allocated")

    def _reserved(self) -> int:
        return sum(s["size"] for s in self._segs.values())

    def _note_peaks(self) -> None:
        self._peak_alloc = max(self._peak_alloc, self._allocated())
        self._peak_res = max(self._peak_res, self._reserved())

    def _whole_segment(self, addr: int) -> bool:
        blk = self._blocks[addr]
        return addr == blk["seg"] and blk["size"] == self._segs[blk["seg"]]["size"]

    # -- cache mechanics ---------------------------------------------------------------------
    def _give_back(self, addr: int) -> None:
        """Free the block and merge it with free neighbours of the same segment."""
        blk = self._blocks[addr]
        blk["state"], blk["uses"], blk["events"] = "free", set(), []
        after = addr + blk["size"]
        nxt = self._blocks.get(after)
        if nxt is not None and nxt["seg"] == blk["seg"] and nxt["state"] == "free":
            blk["size"] += nxt["size"]
            del self._blocks[after]
        before = next((a for a, b in self._blocks.items()
                       if b["seg"] == blk["seg"] and a + b["size"] == addr), None)
        if before is not None and self._blocks[before]["state"] == "free":
            self._blocks[before]["size"] += blk["size"]
            del self._blocks[addr]

    def _drain_events(self) -> None:
        done = [a for a, b in self._blocks.items()
                if b["state"] == "pending" and all(e.query() for e in b["events"])]
        for addr in sorted(done):
            if addr in self._blocks:
                self._give_back(addr)

    def _release_unsplit(self) -> None:
        self._dev.synchronize()
        self._drain_events()
        for seg_addr in sorted(self._segs):
            if self._blocks[seg_addr]["state"] == "free" and self._whole_segment(seg_addr):
                del self._blocks[seg_addr]
                del self._segs[seg_addr]
                self._dev.free(seg_addr)
                self._counts["num_device_frees"] += 1

    def _device_segment(self, size: int, want: int) -> int:
        try:
            return self._dev.malloc(want)
        except DeviceOutOfMemory:
            pass
        self._counts["num_alloc_retries"] += 1
        self._release_unsplit()
        try:
            return self._dev.malloc(want)
        except DeviceOutOfMemory:
            self._counts["num_ooms"] += 1
            raise OutOfMemoryError(size, self._allocated(), self._reserved()) from None

    # -- API ---------------------------------------------------------------------------------
    def malloc(self, size: int, stream: int = 0) -> int:
        """Allocate at least `size` bytes on `stream`; return the block's address."""
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        if stream < 0:
            raise ValueError(f"stream must be non-negative, got {stream}")
        self._drain_events()
        need = round_size(size)
        small = need <= SMALL_SIZE
        fitting = [(blk["size"], addr) for addr, blk in self._blocks.items()
                   if blk["state"] == "free" and blk["size"] >= need
                   and self._segs[blk["seg"]]["small"] == small
                   and self._segs[blk["seg"]]["stream"] == stream]
        best = min(fitting)[1] if fitting else None
        if best is None:
            want = allocation_size(need)
            best = self._device_segment(size, want)
            self._counts["num_device_mallocs"] += 1
            self._segs[best] = {"size": want, "stream": stream, "small": small}
            self._blocks[best] = {"size": want, "state": "free", "seg": best, "uses": set(),
                                  "events": []}
        blk = self._blocks[best]
        if should_split(blk["size"], need, small):
            self._blocks[best + need] = {"size": blk["size"] - need, "state": "free",
                                         "seg": blk["seg"], "uses": set(), "events": []}
            blk["size"] = need
        blk["state"] = "allocated"
        self._note_peaks()
        return best

    def _live(self, ptr: int) -> dict[str, Any]:
        blk = self._blocks.get(ptr) if isinstance(ptr, int) else None
        if blk is None or blk["state"] != "allocated":
            raise ValueError(f"not an allocated block: {ptr!r}")
        return blk

    def free(self, ptr: int) -> None:
        """Give back the block at `ptr`."""
        blk = self._live(ptr)
        if blk["uses"]:
            blk["events"] = [self._dev.record_event(s) for s in sorted(blk["uses"])]
            blk["state"] = "pending"
        else:
            self._give_back(ptr)

    def record_stream(self, ptr: int, stream: int) -> None:
        """Mark the block at `ptr` as used by `stream` too."""
        blk = self._live(ptr)
        if stream < 0:
            raise ValueError(f"stream must be non-negative, got {stream}")
        if stream != self._segs[blk["seg"]]["stream"]:
            blk["uses"].add(stream)

    def empty_cache(self) -> None:
        """Release every unsplit free segment (after synchronizing)."""
        self._release_unsplit()

    def stats(self) -> dict[str, int]:
        """The statistics of STAT_KEYS."""
        inactive = sum(b["size"] for a, b in self._blocks.items()
                       if b["state"] == "free" and not self._whole_segment(a))
        return {"allocated_bytes": self._allocated(), "reserved_bytes": self._reserved(),
                "peak_allocated_bytes": self._peak_alloc, "peak_reserved_bytes": self._peak_res,
                "inactive_split_bytes": inactive, **self._counts}

    def snapshot(self) -> list[dict[str, Any]]:
        """Segments and their blocks, in address order."""
        out = []
        for seg_addr in sorted(self._segs):
            seg = self._segs[seg_addr]
            blocks = [{"address": a, "size": b["size"], "state": b["state"]}
                      for a, b in sorted(self._blocks.items()) if b["seg"] == seg_addr]
            out.append({"address": seg_addr, "size": seg["size"], "stream": seg["stream"],
                        "pool": "small" if seg["small"] else "large", "blocks": blocks})
        return out

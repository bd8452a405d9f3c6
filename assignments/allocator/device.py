"""A fake GPU for the caching allocator (provided, read-only): memory, streams and events.

Nothing here touches real memory: an address is an int, and the device only keeps the books a
real driver keeps. What it models, and what the allocator may rely on:

- `malloc(size)` hands out a *segment* of `size` bytes (a positive multiple of 512) at a fresh
  address, or raises `DeviceOutOfMemory` when the bytes held would exceed `capacity`. Addresses
  are never reused: segment k starts at `BASE_ADDRESS` plus the sizes of the segments before
  it, each rounded up to `SEGMENT_ALIGNMENT` (2 MiB). So the same calls in the same order give
  the same addresses, which is what lets two implementations of one policy agree exactly.
- `free(ptr)` returns a whole segment. Like `cudaFree`, it first waits for all pending work on
  every stream (it synchronises the device): the memory may still be in use by a kernel.
- Streams are ints (0 is the default stream). `launch(stream)` queues one kernel on a stream;
  `complete(stream)` lets every kernel queued on it so far finish; `synchronize()` finishes all
  of them. `record_event(stream)` returns an `Event` that completes once the work queued on
  that stream before the call has finished (at once, if none was pending).
- Counters: `num_malloc_calls` (every call, failed ones included), `num_malloc_failures`,
  `num_free_calls`, and `used_bytes` (bytes held in segments now, mapped pages included).
- STRETCH (expandable segments, README §12), modelled on CUDA's virtual memory management
  (`cuMemAddressReserve`, `cuMemMap`, `cuMemUnmap`): `reserve(size)` takes a virtual range of
  `size` bytes (a positive multiple of `PAGE_SIZE`, 2 MiB) at a fresh address, taken from the
  same sequence as `malloc`'s, and holds no memory; `map(address, size)` backs the pages
  `[address, address + size)` of a reserved range with memory (counted in `used_bytes`, under
  `capacity` like `malloc`); `unmap(address, size)` gives mapped pages back and, like `free`,
  synchronises the device first. Counters: `num_reserve_calls`, `num_map_calls` (failed ones
  included), `num_map_failures`, `num_unmap_calls`.
"""

from __future__ import annotations

MIB = 1 << 20
BASE_ADDRESS = 1 << 40
SEGMENT_ALIGNMENT = 2 * MIB
DEVICE_GRANULE = 512  # every segment size is a multiple of this
PAGE_SIZE = 2 * MIB   # STRETCH: reserve/map/unmap work in whole pages of this size


class DeviceOutOfMemory(RuntimeError):
    """`FakeDevice.malloc` could not fit the segment under the device's capacity."""


class Event:
    """A marker in one stream's queue; `query()` says whether the work before it finished."""

    def __init__(self, device: FakeDevice, stream: int, target: int) -> None:
        self._device, self.stream, self._target = device, stream, target

    def query(self) -> bool:
        """True once every kernel queued on `stream` before the event was recorded finished."""
        return self._device._completed.get(self.stream, 0) >= self._target


class FakeDevice:
    """A device with `capacity` bytes, counting its allocation calls."""

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self.num_malloc_calls = 0
        self.num_malloc_failures = 0
        self.num_free_calls = 0
        self.num_reserve_calls = 0
        self.num_map_calls = 0
        self.num_map_failures = 0
        self.num_unmap_calls = 0
        self._segments: dict[int, int] = {}
        self._reserved: dict[int, int] = {}      # reserved range start -> its size
        self._mapped: set[int] = set()           # addresses of the mapped pages
        self._next_address = BASE_ADDRESS
        self._queued: dict[int, int] = {}
        self._completed: dict[int, int] = {}

    @property
    def used_bytes(self) -> int:
        """Bytes held in segments and mapped pages now (what `nvidia-smi` would show for this
        process)."""
        return sum(self._segments.values()) + len(self._mapped) * PAGE_SIZE

    def malloc(self, size: int) -> int:
        """A new segment of `size` bytes; its address. Raises DeviceOutOfMemory when
        `used_bytes + size > capacity` (the call is still counted) and ValueError when `size` is
        not a positive multiple of 512."""
        self.num_malloc_calls += 1
        if size < 1 or size % DEVICE_GRANULE:
            raise ValueError(f"device malloc of {size} bytes: sizes are positive multiples of "
                             f"{DEVICE_GRANULE}")
        if self.used_bytes + size > self.capacity:
            self.num_malloc_failures += 1
            raise DeviceOutOfMemory(
                f"device malloc of {size} bytes: {self.used_bytes} of {self.capacity} bytes "
                f"in use")
        ptr = self._next_address
        self._segments[ptr] = size
        step = -(-size // SEGMENT_ALIGNMENT) * SEGMENT_ALIGNMENT
        self._next_address = ptr + step
        return ptr

    def free(self, ptr: int) -> None:
        """Return the segment that `malloc` put at `ptr`; synchronises the device first.
        ValueError when `ptr` is not the address of a held segment."""
        if ptr not in self._segments:
            raise ValueError(f"device free of {ptr:#x}: not the address of a held segment")
        self.synchronize()
        self.num_free_calls += 1
        del self._segments[ptr]

    # -- STRETCH: virtual memory (expandable segments, README §12) ----------------------------
    def reserve(self, size: int) -> int:
        """A virtual range of `size` bytes (a positive multiple of PAGE_SIZE) at a fresh address
        (the next one `malloc` would have used); no memory is held until pages are mapped.
        ValueError for a bad size. Reserving never fails for lack of memory."""
        self.num_reserve_calls += 1
        if size < 1 or size % PAGE_SIZE:
            raise ValueError(f"device reserve of {size} bytes: sizes are positive multiples of "
                             f"{PAGE_SIZE}")
        ptr = self._next_address
        self._reserved[ptr] = size
        self._next_address = ptr + size
        return ptr

    def _pages(self, address: int, size: int, what: str) -> list[int]:
        if size < 1 or size % PAGE_SIZE or address % PAGE_SIZE:
            raise ValueError(f"device {what} of {size} bytes at {address:#x}: address and size "
                             f"must be multiples of {PAGE_SIZE}, the size positive")
        inside = any(start <= address and address + size <= start + length
                     for start, length in self._reserved.items())
        if not inside:
            raise ValueError(f"device {what} of {size} bytes at {address:#x}: not inside one "
                             f"reserved range")
        return list(range(address, address + size, PAGE_SIZE))

    def map(self, address: int, size: int) -> None:
        """Back the unmapped pages `[address, address + size)` of one reserved range with
        memory. Raises ValueError for an address or size that is not a multiple of PAGE_SIZE
        (or a size < 1); then DeviceOutOfMemory when `used_bytes + size > capacity` (the call is
        still counted); then ValueError for pages outside one reserved range or already
        mapped."""
        self.num_map_calls += 1
        if size < 1 or size % PAGE_SIZE or address % PAGE_SIZE:
            self._pages(address, size, "map")  # raises the ValueError
        if self.used_bytes + size > self.capacity:
            self.num_map_failures += 1
            raise DeviceOutOfMemory(
                f"device map of {size} bytes: {self.used_bytes} of {self.capacity} bytes in use")
        pages = self._pages(address, size, "map")
        if any(page in self._mapped for page in pages):
            raise ValueError(f"device map at {address:#x}: a page is already mapped")
        self._mapped.update(pages)

    def unmap(self, address: int, size: int) -> None:
        """Give back the mapped pages `[address, address + size)`; synchronises the device
        first (the memory may still be in use by a kernel). ValueError for pages that are not
        all mapped."""
        pages = self._pages(address, size, "unmap")
        if any(page not in self._mapped for page in pages):
            raise ValueError(f"device unmap at {address:#x}: a page is not mapped")
        self.synchronize()
        self.num_unmap_calls += 1
        self._mapped.difference_update(pages)

    def launch(self, stream: int) -> None:
        """Queue one kernel on `stream` (it stays pending until `complete` or `synchronize`)."""
        self._queued[stream] = self._queued.get(stream, 0) + 1

    def complete(self, stream: int) -> None:
        """Every kernel queued on `stream` so far finishes."""
        self._completed[stream] = self._queued.get(stream, 0)

    def synchronize(self) -> None:
        """Every kernel queued on every stream finishes."""
        for stream in self._queued:
            self.complete(stream)

    def has_pending_work(self, stream: int) -> bool:
        """Whether `stream` has kernels that have not finished."""
        return self._completed.get(stream, 0) < self._queued.get(stream, 0)

    def record_event(self, stream: int) -> Event:
        """An event that completes when the kernels queued on `stream` so far have finished."""
        return Event(self, stream, self._queued.get(stream, 0))

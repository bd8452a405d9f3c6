"""Parent-side reference of the allocator policy (README §3–§6), and the judge of traces.

The model never imports code under test nor the provided device: it keeps its own books of
the fake device (addresses, capacity, queued and completed kernels per stream) and of the
allocator, in the plainest form: a list of segments, each a list of blocks, searched
linearly. An operation is a tuple of plain data (tags name the blocks `malloc` returned):

    ("malloc", tag, size, stream) ("free", tag) ("record", tag, stream)
    ("launch", stream) ("complete", stream) ("sync",) ("empty",)
    ("free_addr", address) ("record_addr", address, stream)   (errors: not a block start)

An op naming a tag whose malloc failed is skipped, here and in the rank alike.

STRETCH (README §12): `Model(capacity, expandable=True)` follows the expandable-segments
policy: one segment per (pool, stream) at an address range reserved on its first growth; a miss
maps the pages the request lacks after the segment's free tail; `empty_cache` unmaps the whole
pages of each segment's free last block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MIB = 1 << 20
BASE_ADDRESS = 1 << 40
SEGMENT_ALIGNMENT = 2 * MIB
PAGE = 2 * MIB
STAT_KEYS = ("allocated_bytes", "reserved_bytes", "peak_allocated_bytes", "peak_reserved_bytes",
             "inactive_split_bytes", "num_device_mallocs", "num_device_frees",
             "num_alloc_retries", "num_ooms")
DEVICE_KEYS = ("num_malloc_calls", "num_malloc_failures", "num_free_calls", "used_bytes",
               "num_reserve_calls", "num_map_calls", "num_map_failures", "num_unmap_calls")
STATES = ("allocated", "pending", "free")


def round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def segment_size_for(rounded: int) -> int:
    if rounded <= MIB:
        return 2 * MIB
    return 20 * MIB if rounded < 10 * MIB else round_up(rounded, 2 * MIB)


def splits(remaining: int, small: bool) -> bool:
    return remaining >= 512 if small else remaining > MIB


@dataclass(eq=False)
class Blk:
    addr: int
    size: int
    state: str = "free"
    uses: set[int] = field(default_factory=set)
    events: list[tuple[int, int]] = field(default_factory=list)  # (stream, queued count)


@dataclass(eq=False)
class Seg:
    addr: int
    size: int
    stream: int
    small: bool
    blocks: list[Blk]


class OOM(Exception):
    pass


class Model:
    """The allocator and its device, stepping through operations; `step` returns the record the
    implementation must produce (see `_ranks.py`) plus `info`, what a diagnosis needs."""

    def __init__(self, capacity: int, expandable: bool = False) -> None:
        self.capacity = capacity
        self.expandable = expandable
        self.reservations: dict[tuple[bool, int], int] = {}
        self.segs: list[Seg] = []
        self.pending: list[tuple[Seg, Blk]] = []
        self.queued: dict[int, int] = {}
        self.completed: dict[int, int] = {}
        self.next_addr = BASE_ADDRESS
        self.device = dict.fromkeys(DEVICE_KEYS, 0)
        self.stats = dict.fromkeys(STAT_KEYS, 0)
        self.ptrs: dict[Any, int] = {}
        self.failed_tags: set[Any] = set()

    # -- queries -------------------------------------------------------------------------------
    def snapshot(self) -> list[tuple]:
        return [(s.addr, s.size, s.stream, "small" if s.small else "large",
                 tuple((b.addr, b.size, b.state) for b in s.blocks))
                for s in sorted(self.segs, key=lambda s: s.addr)]

    def locate(self, addr: int) -> tuple[Seg, Blk] | None:
        for seg in self.segs:
            for blk in seg.blocks:
                if blk.addr == addr:
                    return seg, blk
        return None

    def recount(self) -> None:
        s = self.stats
        s["allocated_bytes"] = sum(b.size for g in self.segs for b in g.blocks
                                   if b.state == "allocated")
        s["reserved_bytes"] = sum(g.size for g in self.segs)
        s["inactive_split_bytes"] = sum(b.size for g in self.segs if len(g.blocks) > 1
                                        for b in g.blocks if b.state == "free")
        s["peak_allocated_bytes"] = max(s["peak_allocated_bytes"], s["allocated_bytes"])
        s["peak_reserved_bytes"] = max(s["peak_reserved_bytes"], s["reserved_bytes"])
        self.device["used_bytes"] = s["reserved_bytes"]

    # -- mechanics -----------------------------------------------------------------------------
    def coalesce(self, seg: Seg, blk: Blk) -> None:
        blk.state = "free"
        i = seg.blocks.index(blk)
        if i + 1 < len(seg.blocks) and seg.blocks[i + 1].state == "free":
            blk.size += seg.blocks.pop(i + 1).size
        if i > 0 and seg.blocks[i - 1].state == "free":
            prev = seg.blocks[i - 1]
            prev.size += seg.blocks.pop(i).size

    def process_events(self) -> None:
        waiting = []
        for seg, blk in self.pending:
            if all(self.completed.get(s, 0) >= n for s, n in blk.events):
                blk.events = []
                self.coalesce(seg, blk)
            else:
                waiting.append((seg, blk))
        self.pending = waiting

    def empty_cache(self) -> list[int]:
        for stream in self.queued:
            self.completed[stream] = self.queued[stream]
        self.process_events()
        released = []
        if self.expandable:
            return self.unmap_free_tails()
        for seg in sorted(self.segs, key=lambda s: s.addr):
            if len(seg.blocks) == 1 and seg.blocks[0].state == "free":
                self.segs.remove(seg)
                released.append(seg.addr)
                self.device["num_free_calls"] += 1
                self.stats["num_device_frees"] += 1
        return released

    def unmap_free_tails(self) -> list[int]:
        released = []
        for seg in sorted(self.segs, key=lambda s: s.addr):
            tail = seg.blocks[-1]
            cut, end = round_up(tail.addr, PAGE), tail.addr + tail.size
            if tail.state != "free" or cut >= end:
                continue
            released.append(cut)
            self.device["num_unmap_calls"] += 1
            self.stats["num_device_frees"] += 1
            seg.size -= end - cut
            tail.size = cut - tail.addr
            if not tail.size:
                seg.blocks.pop()
            if not seg.blocks:
                self.segs.remove(seg)
        return released

    def grow(self, rounded: int, small: bool, stream: int) -> tuple[Seg, Blk]:
        key = (small, stream)
        if key not in self.reservations:
            self.device["num_reserve_calls"] += 1
            self.reservations[key] = self.next_addr
            self.next_addr += max(PAGE, round_up(self.capacity, PAGE))
        base = self.reservations[key]
        seg = next((g for g in self.segs if g.addr == base), None)
        tail = seg.blocks[-1] if seg is not None else None
        have = tail.size if tail is not None and tail.state == "free" else 0
        more = round_up(rounded - have, PAGE)
        self.device["num_map_calls"] += 1
        if sum(g.size for g in self.segs) + more > self.capacity:
            self.device["num_map_failures"] += 1
            raise OOM
        if seg is None:
            seg = Seg(base, 0, stream, small, [])
            self.segs.append(seg)
        seg.size += more
        if tail is not None and have:
            tail.size += more
            return seg, tail
        blk = Blk(base + seg.size - more, more)
        seg.blocks.append(blk)
        return seg, blk

    def device_malloc(self, size: int) -> int:
        self.device["num_malloc_calls"] += 1
        if sum(g.size for g in self.segs) + size > self.capacity:
            self.device["num_malloc_failures"] += 1
            raise OOM
        addr = self.next_addr
        self.next_addr += round_up(size, SEGMENT_ALIGNMENT)
        return addr

    def malloc(self, size: int, stream: int, info: dict) -> int:  # noqa: C901
        if size < 1 or stream < 0:
            raise ValueError
        self.process_events()
        rounded = round_up(size, 512)
        small = rounded <= MIB
        info.update(rounded=rounded, small=small, stream=stream, pending={}, other_stream=set(),
                    other_pool=set(), fits=[])
        for seg in self.segs:
            for blk in seg.blocks:
                if blk.state == "pending":
                    info["pending"][blk.addr] = sorted(s for s, _ in blk.events)
                elif blk.state == "free":
                    if seg.small != small:
                        info["other_pool"].add(blk.addr)
                    elif seg.stream != stream:
                        info["other_stream"].add(blk.addr)
                    elif blk.size >= rounded:
                        info["fits"].append((blk.size, blk.addr))
        if info["fits"]:
            _, addr = min(info["fits"])
            seg, blk = self.locate(addr)  # type: ignore[misc]
            info["from"] = "cache"
        elif self.expandable:
            info["from"] = "device"
            try:
                seg, blk = self.grow(rounded, small, stream)
            except OOM:
                self.stats["num_alloc_retries"] += 1
                info["released"] = self.empty_cache()
                try:
                    seg, blk = self.grow(rounded, small, stream)
                except OOM:
                    self.stats["num_ooms"] += 1
                    self.recount()
                    raise
            self.stats["num_device_mallocs"] += 1
        else:
            info["from"] = "device"
            want = segment_size_for(rounded)
            try:
                addr = self.device_malloc(want)
            except OOM:
                self.stats["num_alloc_retries"] += 1
                info["released"] = self.empty_cache()
                try:
                    addr = self.device_malloc(want)
                except OOM:
                    self.stats["num_ooms"] += 1
                    self.recount()
                    raise
            self.stats["num_device_mallocs"] += 1
            blk = Blk(addr, want)
            seg = Seg(addr, want, stream, small, [blk])
            self.segs.append(seg)
        if splits(blk.size - rounded, small):
            rest = Blk(blk.addr + rounded, blk.size - rounded)
            seg.blocks.insert(seg.blocks.index(blk) + 1, rest)
            blk.size = rounded
        blk.state = "allocated"
        return blk.addr

    def allocated_at(self, addr: Any) -> tuple[Seg, Blk]:
        found = self.locate(addr) if isinstance(addr, int) else None
        if found is None or found[1].state != "allocated":
            raise ValueError
        return found

    def free(self, addr: Any) -> None:
        seg, blk = self.allocated_at(addr)
        if blk.uses:
            blk.events = [(s, self.queued.get(s, 0)) for s in sorted(blk.uses)]
            blk.uses = set()
            blk.state = "pending"
            self.pending.append((seg, blk))
        else:
            self.coalesce(seg, blk)

    def record(self, addr: Any, stream: int) -> None:
        seg, blk = self.allocated_at(addr)
        if stream < 0:
            raise ValueError
        if stream != seg.stream:
            blk.uses.add(stream)

    # -- one operation -------------------------------------------------------------------------
    def step(self, op: tuple) -> dict:  # noqa: C901
        """Apply `op`; return the expected record: error, ret, stats, snapshot, device, oom,
        and `info` (for diagnosis)."""
        kind = op[0]
        rec: dict[str, Any] = {"error": None, "ret": None, "oom": None, "info": {}}
        if kind in ("free", "record") and op[1] not in self.ptrs:
            rec["skipped"] = True
            return rec
        try:
            if kind == "malloc":
                if op[1] in self.ptrs:
                    raise AssertionError(f"tag {op[1]!r} reused while live")
                try:
                    addr = self.malloc(op[2], op[3], rec["info"])
                except OOM:
                    self.failed_tags.add(op[1])
                    rec["error"] = "OutOfMemoryError"
                    rec["oom"] = {"requested_bytes": op[2],
                                  "allocated_bytes": self.stats["allocated_bytes"],
                                  "reserved_bytes": self.stats["reserved_bytes"]}
                else:
                    self.ptrs[op[1]] = addr
                    rec["ret"] = addr
            elif kind == "free":
                self.free(self.ptrs.pop(op[1]))
            elif kind == "record":
                self.record(self.ptrs[op[1]], op[2])
            elif kind == "free_addr":
                self.free(op[1])
            elif kind == "record_addr":
                self.record(op[1], op[2])
            elif kind == "launch":
                self.queued[op[1]] = self.queued.get(op[1], 0) + 1
            elif kind == "complete":
                self.completed[op[1]] = self.queued.get(op[1], 0)
            elif kind == "sync":
                for stream in self.queued:
                    self.completed[stream] = self.queued[stream]
            elif kind == "empty":
                rec["info"]["released"] = self.empty_cache()
            else:
                raise AssertionError(f"unknown op {op!r}")
        except ValueError:
            rec["error"] = "ValueError"
        self.recount()
        rec["stats"] = [self.stats[k] for k in STAT_KEYS]
        rec["device"] = [self.device[k] for k in DEVICE_KEYS]
        rec["snapshot"] = self.snapshot()
        return rec

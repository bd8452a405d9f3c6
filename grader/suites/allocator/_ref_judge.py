"""Judge one returned trace against the reference model, operation by operation.

Per operation, in order of severity: the error; for malloc, where the block came from
(diagnosed against the model's cache: best fit, stream, pool, pending, cache miss); the
snapshot's own invariants (blocks tile their segment, sizes multiples of 512, no overlap, no
two adjacent free blocks); the snapshot against the model's; the statistics' own identities;
every statistic; the device's counters. The first failure is raised with a first line that
names the likely cause.
"""

from __future__ import annotations

import re
from typing import Any

from grader.suites.allocator._ref import DEVICE_KEYS, STAT_KEYS, STATES, Model

MIB = 1 << 20


def stat_hint(key: str) -> str:
    """The likely fix when statistic `key` differs (returned strings stay in hidden reasons)."""
    if key == "allocated_bytes":
        return ("allocated_bytes is the sum of the sizes of blocks in state allocated (a block "
                "handed out whole counts its whole size)")
    if key == "reserved_bytes":
        return "reserved_bytes is the sum of the segment sizes held from the device"
    if key == "peak_allocated_bytes":
        return ("update the peak whenever allocated_bytes grows, also when the block comes from "
                "splitting a cached block")
    if key == "peak_reserved_bytes":
        return "update peak_reserved_bytes whenever a segment is added"
    if key == "inactive_split_bytes":
        return "inactive_split_bytes sums the free blocks that are not a whole segment"
    if key == "num_device_mallocs":
        return "count successful device.malloc calls"
    if key == "num_device_frees":
        return "count device.free calls"
    if key == "num_alloc_retries":
        return "count a retry each time device.malloc raised and the cache was emptied"
    return "count each OutOfMemoryError raised"


class TraceMismatch(AssertionError):
    """A record breaks the contract; `args[0]` is the first line students see."""


def describe(op: tuple) -> str:
    kind = op[0]
    if kind == "malloc":
        return f"malloc({op[2]}, stream={op[3]})"
    if kind in ("free", "free_addr"):
        return "free(ptr)"
    if kind in ("record", "record_addr"):
        return f"record_stream(ptr, {op[2]})"
    if kind == "empty":
        return "empty_cache()"
    names = {"launch": "launch", "complete": "complete", "sync": "synchronize"}
    return f"device.{names[kind]}({', '.join(str(a) for a in op[1:])})"


def decode(tensor: Any) -> list[tuple]:
    """The flat int64 snapshot back into (address, size, stream, pool, blocks) tuples."""
    flat = [int(v) for v in tensor.tolist()]
    segments, i = [], 0
    while i < len(flat):
        addr, size, stream, pool, count = flat[i:i + 5]
        i += 5
        blocks = tuple((flat[i + 3 * k], flat[i + 3 * k + 1], STATES[flat[i + 3 * k + 2]])
                       for k in range(count))
        i += 3 * count
        segments.append((addr, size, stream, ("small", "large")[pool], blocks))
    return segments


def check_invariants(snap: list[tuple], where: str) -> None:
    """The snapshot's own invariants: what any correct allocator's snapshot satisfies."""
    end = None
    for addr, size, _stream, _pool, blocks in snap:
        if end is not None and addr < end:
            raise TraceMismatch(f"{where}: segments overlap or are not in address order in "
                                f"snapshot(): list segments in increasing address order")
        end = addr + size
        cursor, prev_state = addr, None
        for b_addr, b_size, state in blocks:
            if b_size % 512 or b_addr % 512:
                raise TraceMismatch(
                    f"{where}: a block of {b_size} bytes at offset {b_addr - addr} is not a "
                    f"multiple of 512: round every request up to a multiple of 512 (alignment)")
            if b_addr != cursor or b_size <= 0:
                raise TraceMismatch(f"{where}: the blocks of a segment overlap or leave a gap: "
                                    f"blocks must tile their segment in address order")
            if state == "free" and prev_state == "free":
                raise TraceMismatch(
                    f"{where}: two adjacent free blocks in one segment: coalesce a block "
                    f"returned to the cache with its free neighbours (before and after)")
            cursor, prev_state = cursor + b_size, state
        if cursor != addr + size:
            raise TraceMismatch(f"{where}: the blocks of a segment of {size} bytes add up to "
                                f"{cursor - addr}: every byte of a segment is in one block")


GROW_HINT = ("with expandable segments a miss grows the segment of its pool and stream: map "
             "only the pages the request lacks after the segment's free tail (whole 2 MiB "
             "pages), grow that free tail (or add the new pages as a last block) and hand out "
             "its lower part")
UNMAP_HINT = ("with expandable segments, empty_cache (and the out-of-memory retry) must unmap "
              "the whole pages of free tails: each segment's free last block, from its address "
              "rounded up to 2 MiB to the segment's end, segments in address order")


def pending_at(snap: list[tuple]) -> set[int]:
    """The addresses of the pending blocks of a snapshot (a difference there has its own,
    sharper diagnosis in compare_snapshot)."""
    return {b[0] for seg in snap for b in seg[4] if b[2] == "pending"}


def diagnose_malloc(got: int | None, exp: dict, model_before: list[tuple], where: str,
                    expandable: bool = False) -> None:
    """Raise with the likely cause when malloc returned another address than the model's."""
    info, want = exp["info"], exp["ret"]
    if got == want:
        return
    if expandable and info.get("from") == "device":
        raise TraceMismatch(f"{where} returned another block than the policy's: {GROW_HINT}")
    cached = {b[0]: (seg, b) for seg in model_before for b in seg[4]}
    prefix = f"{where} returned another block than the policy's"
    if got in info.get("pending", {}):
        raise TraceMismatch(
            f"{prefix}: it reused a block freed while a stream named by record_stream still had "
            f"pending work; keep it pending until the events recorded on free complete")
    if got in info.get("other_stream", set()):
        raise TraceMismatch(f"{prefix}: it took a cached block of another stream; each stream "
                            f"has its own pools (blocks are reused only on their own stream)")
    if got in info.get("other_pool", set()):
        raise TraceMismatch(f"{prefix}: it took a block of the other pool; requests <= 1 MiB "
                            f"(after rounding) use the small pool, larger ones the large pool")
    fits = dict((a, s) for s, a in info.get("fits", []))
    if got in fits:
        raise TraceMismatch(
            f"{prefix}: it took a cached block of {fits[got]} bytes but the best fit has "
            f"{min(info['fits'])[0]} bytes: pick the smallest free block that fits (size, then "
            f"address), not the first one")
    if info.get("from") == "cache" and got not in cached:
        raise TraceMismatch(
            f"{prefix}: it asked the device for a new segment but a cached free block of "
            f"{min(info['fits'])[0]} bytes on this stream and pool fits: search the cache first")
    if info.get("from") == "device" and got in cached:
        raise TraceMismatch(f"{prefix}: no cached block of this pool and stream may serve it "
                            f"(it needs a new segment), but it returned an existing block")
    raise TraceMismatch(f"{prefix}: expected offset {want - 2**40 if want else want} from the "
                        f"device base, got {got - 2**40 if isinstance(got, int) else got}")


def compare_snapshot(got: list[tuple], exp: list[tuple], op: tuple, exp_rec: dict,
                     where: str) -> None:
    if got == exp:
        return
    got_by, exp_by = {s[0]: s for s in got}, {s[0]: s for s in exp}
    if op[0] == "malloc" and exp_rec["ret"] is not None:
        ret = exp_rec["ret"]
        exp_seg = next((seg for seg in exp if any(b[0] == ret for b in seg[4])), None)
        got_seg = next((seg for seg in got if any(b[0] == ret for b in seg[4])), None)
        if exp_seg and got_seg and exp_seg[1:4] != got_seg[1:4]:
            raise TraceMismatch(
                f"{where}: wrong pool or segment size: a request of at most 1 MiB after "
                f"rounding uses the small pool (2 MiB segments), a larger one the large pool "
                f"(allocation_size); got {got_seg[3]}, {got_seg[1]} bytes, expected "
                f"{exp_seg[3]}, {exp_seg[1]}")
        exp_blk = next((b for s in exp for b in s[4] if b[0] == ret), None)
        got_blk = next((b for s in got for b in s[4] if b[0] == ret), None)
        if exp_blk and got_blk and exp_blk[1] != got_blk[1]:
            raise TraceMismatch(
                f"{where} handed out a block of {got_blk[1]} bytes, expected {exp_blk[1]}: "
                f"split only when the remainder is >= 512 B (small pool) or > 1 MiB (large "
                f"pool); otherwise hand out the whole block")
    for addr in sorted(set(exp_by) - set(got_by)):
        seg = exp_by[addr]
        if len(seg[4]) > 1 or seg[4][0][2] != "free":
            raise TraceMismatch(
                f"{where}: a segment that is split or holds allocated or pending blocks was "
                f"released: release only unsplit segments (one free block)")
        raise TraceMismatch(f"{where}: a segment of {seg[1]} bytes the policy keeps is gone")
    for addr in sorted(set(got_by) - set(exp_by)):
        seg = got_by[addr]
        raise TraceMismatch(
            f"{where}: snapshot() lists a segment of {seg[1]} bytes the policy does not hold: "
            f"empty_cache and the out-of-memory retry synchronize first (pending blocks return "
            f"to the cache), then release every unsplit free segment")
    for addr in sorted(exp_by):
        g, e = got_by[addr], exp_by[addr]
        if g[:4] != e[:4]:
            raise TraceMismatch(f"{where}: a segment's (size, stream, pool) is {g[1:4]}, "
                                f"expected {e[1:4]}")
        for gb, eb in zip(g[4], e[4]):
            if gb != eb:
                if eb[2] == "pending" and gb[2] == "free":
                    raise TraceMismatch(
                        f"{where}: a block freed after record_stream is back in the cache while "
                        f"the recorded stream still has pending work: record an event per "
                        f"stream on free and keep the block pending until they complete")
                if eb[2] == "free" and gb[2] == "pending":
                    raise TraceMismatch(
                        f"{where}: a block is still pending though its events completed: "
                        f"return pending blocks to the cache at the start of malloc and in "
                        f"empty_cache (after synchronize)")
                raise TraceMismatch(f"{where}: block (offset {gb[0] - addr}, {gb[1]} bytes, "
                                    f"{gb[2]}) in a segment, expected (offset {eb[0] - addr}, "
                                    f"{eb[1]} bytes, {eb[2]})")
        raise TraceMismatch(f"{where}: a segment has {len(g[4])} blocks, expected {len(e[4])}")


def released_split(got: dict, exp: dict, where: str) -> None:
    """Raise when the implementation released a segment that the policy keeps because it is
    split or in use (checked first when an error differs: it explains the difference)."""
    if "snapshot" not in got:
        return
    have = {seg[0] for seg in decode(got["snapshot"])}
    for seg in exp["snapshot"]:
        if seg[0] not in have and (len(seg[4]) > 1 or seg[4][0][2] != "free"):
            raise TraceMismatch(
                f"{where}: a segment that is split or holds allocated or pending blocks was "
                f"released: release only unsplit segments (one free block)")


def check_identities(stats: list, snap: list[tuple], device: list, where: str) -> None:
    """What the statistics must be, given the implementation's own snapshot and device."""
    s = dict(zip(STAT_KEYS, stats, strict=True))
    allocated = sum(b[1] for seg in snap for b in seg[4] if b[2] == "allocated")
    reserved = sum(seg[1] for seg in snap)
    if s["reserved_bytes"] != reserved or reserved != device[3]:
        raise TraceMismatch(f"{where}: reserved_bytes is {s['reserved_bytes']}, the segments "
                            f"in snapshot() add up to {reserved} and the device holds "
                            f"{device[3]}: every byte must be accounted for")
    if s["allocated_bytes"] != allocated:
        raise TraceMismatch(f"{where}: allocated_bytes is {s['allocated_bytes']} but the "
                            f"allocated blocks in snapshot() add up to {allocated}")


def check_oom(got: dict | None, exp: dict, where: str) -> None:
    if not isinstance(got, dict):
        raise TraceMismatch(f"{where}: OutOfMemoryError without its attributes")
    for key in ("requested_bytes", "allocated_bytes", "reserved_bytes"):
        if got.get(key) != exp[key]:
            raise TraceMismatch(f"{where}: OutOfMemoryError.{key} is {got.get(key)}, expected "
                                f"{exp[key]} (the caller's size; the statistics after the "
                                f"release)")
    numbers = set(re.findall(r"(?<![\d.])\d+(?![\d.])", str(got.get("message", ""))))
    for key in ("requested_bytes", "allocated_bytes", "reserved_bytes"):
        if str(exp[key]) not in numbers:
            raise TraceMismatch(f"{where}: the OutOfMemoryError message must report {key} as a "
                                f"plain integer ({exp[key]}); got {got.get('message')!r}"[:300])


def error_hint(expected: str | None, got: str | None) -> str:
    """The likely fix when the error differs (returned strings stay in hidden reasons)."""
    if expected is None and got == "OutOfMemoryError":
        return (": on DeviceOutOfMemory, empty the cache (release every unsplit free segment) "
                "and retry the device malloc once before raising")
    if expected == "OutOfMemoryError":
        return (": after the one retry fails, raise OutOfMemoryError (do not search the cache "
                "again or free blocks that are in use)")
    return ""


def judge_trace(capacity: int, ops: list[tuple], trace: list[dict], name: str,  # noqa: C901
                expandable: bool = False) -> None:
    """Raise TraceMismatch at the first record that breaks the contract (with `expandable`,
    of the expandable-segments policy, README §12)."""
    if trace and "init_error" in trace[0]:
        made = ("CachingAllocator(device, expandable_segments=True)" if expandable
                else "CachingAllocator(device)")
        raise TraceMismatch(f"{name}: {made} raised {trace[0]['init_error']}")
    model = Model(capacity, expandable)
    for i, op in enumerate(ops):
        where = f"{name}, op {i + 1} {describe(op)}"
        before = model.snapshot()
        exp = model.step(op)
        if i >= len(trace):
            raise TraceMismatch(f"{where}: the trace stopped early")
        got = trace[i]
        if exp.get("skipped") or got.get("skipped"):
            if exp.get("skipped") != got.get("skipped"):
                raise TraceMismatch(f"{where}: an earlier malloc failed in one run and not in the "
                                    f"other")
            continue
        if got["error"] != exp["error"]:
            released_split(got, exp, where)
            fix = error_hint(exp["error"], got["error"])
            raise TraceMismatch(f"{where} raised {got['error'] or 'nothing'}, expected "
                                f"{exp['error'] or 'success'}{fix}")
        if "snapshot_error" in got:
            raise TraceMismatch(f"{where}: stats() or snapshot() raised {got['snapshot_error']}")
        if op[0] == "malloc" and exp["error"] is None:
            diagnose_malloc(got["ret"], exp, before, where, expandable)
        snap = decode(got["snapshot"])
        check_invariants(snap, where)
        if (expandable and pending_at(snap) != pending_at(exp["snapshot"])
                and (op[0] == "empty" or "released" in exp["info"])):
            raise TraceMismatch(f"{where}: blocks are still pending: empty_cache and the "
                                f"out-of-memory retry synchronize first (pending blocks return "
                                f"to the cache), then unmap")
        if expandable and snap != exp["snapshot"] and pending_at(snap) == pending_at(
                exp["snapshot"]):
            if op[0] == "empty" or "released" in exp["info"]:
                raise TraceMismatch(f"{where}: the segments differ from the policy's: "
                                    f"{UNMAP_HINT}")
            if op[0] == "malloc":
                raise TraceMismatch(f"{where}: the segments differ from the policy's: "
                                    f"{GROW_HINT}")
        compare_snapshot(snap, exp["snapshot"], op, exp, where)
        if None in got["stats"]:
            missing = [k for k, v in zip(STAT_KEYS, got["stats"], strict=True) if v is None]
            raise TraceMismatch(f"{where}: stats() lacks the int statistics {missing}")
        check_identities(got["stats"], snap, got["device"], where)
        for key, g, e in zip(STAT_KEYS, got["stats"], exp["stats"], strict=True):
            if g != e:
                hint = stat_hint(key)
                if expandable and key in ("reserved_bytes", "peak_reserved_bytes",
                                          "num_device_mallocs", "num_device_frees"):
                    hint = (f"{GROW_HINT}; {UNMAP_HINT} (num_device_mallocs counts device.map "
                            f"calls, num_device_frees device.unmap calls)")
                raise TraceMismatch(f"{where}: {key} is {g}, expected {e}: {hint}")
        for key, g, e in zip(DEVICE_KEYS, got["device"], exp["device"], strict=True):
            if g != e:
                if expandable:
                    raise TraceMismatch(
                        f"{where}: the device's {key} is {g}, expected {e}: reserve once per "
                        f"pool and stream; {GROW_HINT}; {UNMAP_HINT}")
                raise TraceMismatch(f"{where}: the device's {key} is {g}, expected {e}: call "
                                    f"device.malloc once per cache miss and once more (the "
                                    f"retry) after emptying the cache when it raised")
        if exp["error"] == "OutOfMemoryError":
            check_oom(got["oom"], exp["oom"], where)
    if len(trace) != len(ops):
        raise TraceMismatch(f"{name}: {len(trace)} records for {len(ops)} operations")

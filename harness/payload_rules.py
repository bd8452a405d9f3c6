"""What plain data is, and every limit on it: the rules both sides of the rank boundary share.

`harness/payload.py` applies them to a value (converting it in the rank, checking it once
loaded in the parent); `harness/payload_scan.py` applies them to a result file's bytes before
anything is unpickled. Keeping them here means the three checks cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Caps:
    """Every limit on a rank's result, in one place."""

    max_bytes: int = 64 * 1024 * 1024  # the file; also tensor data, counted per path
    max_nodes: int = 500_000  # values as a naive walk meets them (shared ones per path)
    max_depth: int = 64  # nesting of lists/tuples/dicts
    max_ops: int = 2_000_000  # pickle opcodes: bounds the unpickler's time
    max_entries: int = 100_000  # records in the zip archive (one per tensor storage)
    max_ndim: int = 64  # dimensions of one tensor


CAPS = Caps()
DEFAULT_MAX_BYTES = CAPS.max_bytes
SCALARS = (bool, int, float, str, type(None))  # the plain values that are not containers


def caps_for(max_bytes: int) -> Caps:
    """`CAPS` with `max_bytes` in place of its own (the launcher may set a smaller cap)."""
    return CAPS if max_bytes == CAPS.max_bytes else Caps(**{**CAPS.__dict__,
                                                           "max_bytes": max_bytes})


def check_view(size: tuple[int, ...], stride: tuple[int, ...], offset: int,
               storage_numel: int) -> str:
    """'' if a tensor of `size`/`stride` at `offset` is a plain view into a storage of
    `storage_numel` elements; otherwise why not (stride-0, negative, overlapping, outside)."""
    if len(size) != len(stride):
        return "has mismatched sizes and strides"
    if any(s < 0 for s in size) or offset < 0:
        return "has a negative size or offset"
    if any(s == 0 for s in size):
        return ""
    dims = sorted((st, sz) for sz, st in zip(size, stride) if sz > 1)
    reach = 0  # the last element the smaller-strided dimensions reach, relative to the start
    for st, sz in dims:
        if st == 0:
            return "is an expanded (stride-0) view"
        if st < 0:
            return "has a negative stride"
        if st <= reach:
            return "is an overlapping view (its elements share memory)"
        reach += (sz - 1) * st
    if offset + reach + 1 > storage_numel:
        return (f"reaches element {offset + reach} of a storage of {storage_numel} "
                f"(out of its storage)")
    return ""

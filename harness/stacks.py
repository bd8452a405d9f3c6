"""Reading faulthandler dumps: one line per rank saying where it was blocked, and the one line
of a hang that says who waited on what (`hang_headline`)."""

from __future__ import annotations

import os
import re
from collections.abc import Collection

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_LIBRARY_PARTS = (f"{os.sep}torch{os.sep}", f"{os.sep}multiprocessing", f"{os.sep}threading.py",
                  f"{os.sep}site-packages{os.sep}", "<string>")
_HARNESS_DIR = os.path.dirname(os.path.abspath(__file__))


def _is_library(file: str) -> bool:
    return any(p in file for p in _LIBRARY_PARTS) or os.path.dirname(file) == _HARNESS_DIR


def _frames(block: str) -> list[tuple[str, int, str]]:
    return [(m["file"], int(m["line"]), m["func"]) for m in _FRAME.finditer(block)]


def _main_frames(text: str) -> list[tuple[str, int, str]]:
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", text.strip())
    main = next((b for b in blocks if b.startswith("Current thread")), blocks[0] if blocks else "")
    return _frames(main)


_COMMUNICATION_FILES = ("distributed_c10d.py",)


def waiting_in(text: str) -> tuple[str, str]:
    """(the call a rank waits in, where the rank's own code made it) from its faulthandler
    dump: the outermost `torch.distributed` function on the stack (`all_to_all_single`,
    `recv`, `barrier`), else the innermost frame; the caller is the innermost frame outside
    torch, the standard library and the harness ("" when none). ("", "") without a stack."""
    frames = _main_frames(text)
    if not frames:
        return "", ""
    comm = [f for f in frames if os.path.basename(f[0]) in _COMMUNICATION_FILES]
    call = comm[-1][2] if comm else frames[0][2]
    user = next((f for f in frames if not _is_library(f[0])), None)
    caller = f"{os.path.basename(user[0])}:{user[1]} in {user[2]}" if user else ""
    return call, caller


def _ranks(ranks: list[int]) -> str:
    """"rank 2", "ranks 1-3", "ranks 0, 2"."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ", ".join(str(r) for r in ranks)


def hang_headline(stacks: dict[int, str], world_size: int,
                  finished: Collection[int] = ()) -> str:
    """Who waited on what, in one line, from the stacks of the ranks still running (the others
    returned): "rank 0 of 4 waits in all_to_all_single (called from moe.py:88 in backward)
    while ranks 1-3 returned". `finished`: running ranks known to have finished the hung case
    (they wait for the others after it), named as such instead of by their stack. Never
    empty."""
    groups: dict[tuple[str, str], list[int]] = {}
    done = sorted(r for r in stacks if r in set(finished))
    for rank in sorted(stacks):
        if rank not in done:
            groups.setdefault(waiting_in(stacks[rank]), []).append(rank)
    parts: list[str] = []
    for (call, caller), ranks in groups.items():
        who = _ranks(ranks) + ("" if parts else f" of {world_size}")
        if not call:
            parts.append(f"{who} gave no stack")
            continue
        verb = "waits" if len(ranks) == 1 else "wait"
        parts.append(f"{who} {verb} in {call}" + (f" (called from {caller})" if caller else ""))
    if done:
        verb = "finished" if parts else f"of {world_size} finished"
        parts.append(f"{_ranks(done)} {verb} the case and wait{'s' if len(done) == 1 else ''} "
                     f"for the others")
    head = "; ".join(parts) or f"none of {world_size} ranks gave a stack"
    returned = [r for r in range(world_size) if r not in stacks]
    if returned:
        head += f" while {_ranks(returned)} returned"
    return head


def summarize_stack(text: str) -> str:
    """`in recv (distributed_c10d.py:2563), called from ring.py:42 in ring_shift`, or the like.

    Uses the thread marked "Current thread" (the main thread when SIGUSR1 arrived), else the first.
    """
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", text.strip())
    main = next((b for b in blocks if b.startswith("Current thread")), blocks[0] if blocks else "")
    frames = _frames(main)
    if not frames:
        return "no Python stack (the rank did not answer)"
    file, line, func = frames[0]
    where = f"in {func} ({os.path.basename(file)}:{line})"
    user = next((f for f in frames if not _is_library(f[0])), None)
    if user is not None and user != frames[0]:
        where += f", called from {os.path.basename(user[0])}:{user[1]} in {user[2]}"
    return where

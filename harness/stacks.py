"""Reading faulthandler dumps: one line per rank saying where it was blocked."""

from __future__ import annotations

import os
import re

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_LIBRARY_PARTS = (f"{os.sep}torch{os.sep}", f"{os.sep}multiprocessing", f"{os.sep}threading.py",
                  f"{os.sep}site-packages{os.sep}", "<string>")
_HARNESS_DIR = os.path.dirname(os.path.abspath(__file__))


def _is_library(file: str) -> bool:
    return any(p in file for p in _LIBRARY_PARTS) or os.path.dirname(file) == _HARNESS_DIR


def _frames(block: str) -> list[tuple[str, int, str]]:
    return [(m["file"], int(m["line"]), m["func"]) for m in _FRAME.finditer(block)]


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

"""Reading what a rank left in its folder: data the parent never trusts.

A rank owns its folder, so any name in it may be a symlink (to a huge file, to another rank's
file, to a device), a FIFO (an `open()` for reading blocks until someone writes), a hard link
shared with a folder its peers can read, or a sparse file. Every file the parent reads from a
rank's folder goes through `read_capped`:

- opened with `O_NOFOLLOW | O_NONBLOCK` (a symlink is refused, a FIFO does not block),
- checked with `fstat` on the open descriptor to be a regular file (no FIFO, socket, device),
- read with a size cap: never more than `cap + 1` bytes, whatever the file claims.

`own_bytes` counts, for the "bytes written outside the log" figure, only what the rank's own
files really hold: `lstat` (a symlink counts 0, whatever it points to), one link only (a hard
link into a folder peers read is not the rank's own), blocks on disk (a sparse file counts
what it holds).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

__all__ = ["RankFileError", "own_bytes", "read_capped", "read_text", "size", "tail"]

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class RankFileError(OSError):
    """A file in a rank's folder that the parent refuses to read (not a regular file, a
    symlink, over the cap); `why` says which, in words."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(why)
        self.path = path
        self.why = why

    def __str__(self) -> str:
        return f"{os.path.basename(self.path)}: {self.why}"


def _open(path: str) -> tuple[int, os.stat_result]:
    """An open descriptor on the regular file at `path` and its fstat; raises OSError
    (FileNotFoundError when missing) or RankFileError."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        if os.path.islink(path):
            raise RankFileError(path, "is a symbolic link, not a file the rank wrote") from None
        raise exc
    try:
        info = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise RankFileError(path, "is not a regular file (a FIFO, socket or device?)")
    return fd, info


def read_capped(path: str, cap: int, *, offset: int = 0) -> bytes:
    """At most `cap` bytes of the regular file `path`, from `offset` (negative: from the end).

    Raises FileNotFoundError when it is missing, RankFileError when it is a symlink, a FIFO or
    anything but a regular file, or when it holds more than `cap` bytes past `offset` (then
    nothing is returned: use a negative `offset` to read a tail instead)."""
    fd, info = _open(path)
    try:
        if offset < 0:
            os.lseek(fd, max(0, info.st_size + offset), os.SEEK_SET)
        elif offset:
            os.lseek(fd, offset, os.SEEK_SET)
        chunks: list[bytes] = []
        left = cap + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > cap:
        raise RankFileError(path, f"is over the cap of {cap} bytes")
    return data


def read_text(path: str, cap: int) -> str:
    """`read_capped` decoded as UTF-8 (bad bytes replaced)."""
    return read_capped(path, cap).decode("utf-8", errors="replace")


def tail(path: str, chars: int) -> str:
    """The last `chars` bytes of the regular file `path` as text, with "…" in front when cut;
    "" when it is missing, not a regular file or a symlink (never blocks)."""
    try:
        fd, info = _open(path)
    except OSError:
        return ""
    os.close(fd)
    try:
        data = read_capped(path, chars, offset=-chars)
    except OSError:
        return ""
    text = data.decode(errors="replace")
    return ("…" + text) if info.st_size > chars else text


def size(path: str) -> int:
    """The size `lstat` gives the regular file `path`; 0 when missing or not a regular file."""
    try:
        info = os.lstat(path)
    except OSError:
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) else 0


def own_bytes(paths: Iterable[str]) -> int:
    """Bytes the rank's own files hold: regular files (by `lstat`, so a symlink counts
    nothing) with one link only (a hard link shared with another folder is not its own),
    counted by the blocks they take on disk (a sparse file counts what it holds)."""
    total = 0
    for path in paths:
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            continue
        total += min(info.st_size, info.st_blocks * 512)
    return total

"""The grading's temporary folders: claimed by their session, swept when it is gone, measured.

- `make(prefix)`: a fresh folder (mkdtemp) that this process *claims*: it holds an exclusive
  `flock` on the folder's `.owner` file for as long as it lives (the descriptor is not inherited
  across exec, so ranks and servers do not keep it), and `release` gives it up.
- `sweep()`: removes the course's folders in the temp directory (`PREFIXES`) whose owner is
  gone — the lock can be taken — and, for folders made before owners were recorded, those
  untouched for `LEGACY_STALE_S`. Run once per process when the first forkserver starts, so a
  killed session's folders (its sandbox, interpreter script, launch and sidecar folders) do not
  pile up in /tmp.
- `usage(folder)`: what a launch's folder takes on disk, by `lstat` (links are not followed;
  blocks, so a sparse file counts what it holds and a preallocated one what it reserves), and
  how many entries; the launcher's disk cap reads it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
import threading
import time

__all__ = ["LEGACY_STALE_S", "OWNER", "PREFIXES", "make", "release", "sweep", "usage"]

OWNER = ".owner"
PREFIXES = ("mlsys-interpreter-", "mlsys-sandbox-", "mlsys-launch-", "mlsys-sidecar-")
LEGACY_STALE_S = 6 * 3600  # a folder with no owner file, untouched this long, is stale
_held: dict[str, int] = {}
_lock = threading.Lock()
_swept = False


def make(prefix: str, dir: str | None = None) -> str:
    """A fresh folder (mode 0700) claimed by this process; `release` it before removing it."""
    folder = tempfile.mkdtemp(prefix=prefix, dir=dir)
    fd = os.open(os.path.join(folder, OWNER), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    with _lock:
        _held[folder] = fd
    return folder


def release(folder: str) -> None:
    """Give up the claim on `folder` (before or after it is removed)."""
    with _lock:
        fd = _held.pop(folder, None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def _owner_gone(folder: str) -> bool:
    """Whether nobody holds `folder`'s claim (a legacy folder: whether it is old enough)."""
    owner = os.path.join(folder, OWNER)
    try:
        fd = os.open(owner, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        try:
            return time.time() - os.lstat(folder).st_mtime > LEGACY_STALE_S
        except OSError:
            return False
    except OSError:
        return False  # not ours to judge (another user's folder, a link)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: its session is alive
    finally:
        os.close(fd)
    return True


def sweep(base: str | None = None) -> list[str]:
    """Remove the stale course folders in `base` (default: the temp directory); returns them.
    Never a folder this process holds, never a link, never another user's folder."""
    base = base or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = os.listdir(base)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(PREFIXES):
            continue
        folder = os.path.join(base, name)
        with _lock:
            if folder in _held:
                continue
        try:
            info = os.lstat(folder)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            continue
        if _owner_gone(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def sweep_once() -> None:
    """`sweep()` the first time this process asks; later calls do nothing."""
    global _swept
    with _lock:
        if _swept:
            return
        _swept = True
    sweep()


def usage(folder: str, max_entries: int) -> tuple[int, int]:
    """(bytes on disk, entries) under `folder`, by `lstat`; stops counting once it has seen
    more than `max_entries` entries (the caller's limit is then passed anyway)."""
    total, entries = 0, 0
    todo = [folder]
    while todo:
        try:
            with os.scandir(todo.pop()) as items:
                for item in items:
                    entries += 1
                    if entries > max_entries:
                        return total, entries
                    try:
                        info = item.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(info.st_mode):
                        todo.append(item.path)
                    else:
                        total += info.st_blocks * 512
        except OSError:
            continue
    return total, entries

"""Finding and killing process trees (read through `harness.procfs`), so no rank outlives its
call."""

from __future__ import annotations

import os
import signal
import time

from harness import procfs


def descendants(pid: int) -> set[int]:
    """Live (non-zombie) descendants of `pid`, not including it."""
    parents = procfs.parents()
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(pid: int, *, group: bool = True) -> None:
    """SIGKILL `pid`, its process group (when it leads one) and every descendant.

    Descendants are frozen with SIGSTOP first so a fork bomb cannot outrun the scan.
    """
    for _ in range(50):
        found = descendants(pid)
        for child in found:
            _signal(child, signal.SIGSTOP)
        if found == descendants(pid):
            break
    for child in descendants(pid) | {pid}:
        _signal(child, signal.SIGKILL)
    if group:
        # Orphans (whose parent died first) are no longer descendants but keep the group; a
        # fork racing with killpg can still add one, so repeat until the group is empty.
        deadline = time.monotonic() + 2.0
        while True:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                break
            if not procfs.group_members(pid) or time.monotonic() > deadline:
                break
            time.sleep(0.002)


def kill_group(pgid: int) -> None:
    """SIGKILL whatever is left in process group `pgid` (orphans of an exited rank)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def wait_gone(pids: set[int], timeout: float = 2.0) -> set[int]:
    """Wait until none of `pids` is alive (or a zombie); return those still alive."""
    deadline = time.monotonic() + timeout
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        live = procfs.parents()
        alive = {p for p in alive if p in live}
        if alive:
            time.sleep(0.01)
    return alive

"""Finding and killing process trees (read through `harness.procfs`), so no rank outlives its
call."""

from __future__ import annotations

import os
import signal
import time

from harness import procfs


def descendants(pid: int) -> set[int]:
    """Live (non-zombie) descendants of `pid`, not including it."""
    return _below([pid], procfs.parents())


def _below(pids: list[int], parents: dict[int, int]) -> set[int]:
    """Descendants of any of `pids` (not themselves) in one snapshot of {pid: parent pid}."""
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    stack = list(pids)
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
    """SIGKILL `pid`, its process group (when it leads one) and every descendant."""
    kill_trees([pid], group=group)


def kill_trees(pids: list[int], *, group: bool = True) -> None:
    """SIGKILL each of `pids`, the process group each leads (`group`) and every descendant.

    Descendants are frozen with SIGSTOP first so a fork bomb cannot outrun the scan. The trees
    of all `pids` are read from the same few scans of /proc (a launch ends all its ranks with
    one call: each scan reads every process of the machine).
    """
    pids = list(pids)
    for _ in range(50):
        found = _below(pids, procfs.parents())
        for child in found:
            _signal(child, signal.SIGSTOP)
        if found == _below(pids, procfs.parents()):
            break
    for child in _below(pids, procfs.parents()) | set(pids):
        _signal(child, signal.SIGKILL)
    if group:
        # Orphans (whose parent died first) are no longer descendants but keep the group; a
        # fork racing with killpg can still add one, so repeat until the groups are empty.
        deadline = time.monotonic() + 2.0
        leaders = set(pids)
        while leaders:
            for leader in list(leaders):
                try:
                    os.killpg(leader, signal.SIGKILL)
                except (ProcessLookupError, PermissionError, OSError):
                    leaders.discard(leader)
            if not leaders or time.monotonic() > deadline:
                break
            leaders &= procfs.groups_with_members(leaders)
            if leaders:
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

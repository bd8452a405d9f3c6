"""Reading processes through /proc (Linux): every /proc reader of the harness lives here.

Each reader is best effort: a process that is gone, or a system without /proc, gives the
empty answer (no fields, not stopped, no count) rather than an error.
"""

from __future__ import annotations

import os


def pids() -> list[int]:
    """Every process id /proc lists (none without /proc)."""
    if not os.path.isdir("/proc"):
        return []
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def stat_fields(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name: state, ppid, pgrp, ...

    The command name may hold spaces and parentheses, so the fields follow the last ')'.
    Empty when the process is gone.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return []
    return stat[stat.rfind(")") + 2:].split()


def parents() -> dict[int, int]:
    """{pid: parent pid} of every live (non-zombie) process."""
    found: dict[int, int] = {}
    for pid in pids():
        fields = stat_fields(pid)
        try:
            if fields[0] != "Z":
                found[pid] = int(fields[1])
        except (IndexError, ValueError):
            continue
    return found


def group_members(pgid: int) -> set[int]:
    """Live (non-zombie) processes whose process group is `pgid`."""
    members = set()
    for pid in pids():
        fields = stat_fields(pid)
        try:
            if fields[0] != "Z" and int(fields[2]) == pgid:
                members.add(pid)
        except (IndexError, ValueError):
            continue
    return members


def groups_with_members(pgids: set[int]) -> set[int]:
    """Those of the process groups `pgids` that still have a live (non-zombie) member."""
    found = set()
    for pid in pids():
        fields = stat_fields(pid)
        try:
            if fields[0] != "Z" and int(fields[2]) in pgids:
                found.add(int(fields[2]))
        except (IndexError, ValueError):
            continue
    return found


def is_stopped(pid: int) -> bool:
    """Whether `pid` is stopped (state T or t): a rank that wrote its result waits so."""
    fields = stat_fields(pid)
    return bool(fields) and fields[0] in ("T", "t")


def activity(pid: int) -> tuple[int, bool] | None:
    """(CPU clock ticks its threads have used, whether one of them is running or waiting for
    the disk right now) of `pid`; None when it is gone or /proc is missing."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    ticks, busy = 0, False
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue  # a thread that just ended
        fields = stat[stat.rfind(")") + 2:].split()
        try:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        except (IndexError, ValueError):
            continue
        busy |= fields[0] in ("R", "D")
    return ticks, busy


def written_bytes(pid: int) -> int | None:
    """Bytes `pid` has written through write-like system calls (sockets and files), per the
    kernel — the code under test cannot hide from or edit this count. None without /proc."""
    try:
        with open(f"/proc/{pid}/io") as f:
            fields = dict(line.split(": ") for line in f.read().splitlines())
        return int(fields["wchar"])
    except (OSError, KeyError, ValueError):
        return None


def cmdline(pid: int) -> list[str]:
    """The arguments `pid` was started with (its first 4 KiB; empty when it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return []
    return [arg.decode(errors="replace") for arg in raw.split(b"\0")[:-1]]


def namespace_pids(pid: int) -> list[int]:
    """`pid` as each PID namespace it lives in sees it, outermost first (NSpid in
    /proc/<pid>/status): one entry outside any PID namespace, empty when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return [int(v) for v in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return []


def children(pid: int) -> list[int] | None:
    """Children of `pid` (zombies included), from /proc/<pid>/task/*/children: cheaper than a
    scan of every process. None where the kernel does not list them (a scan is needed)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return [] if os.path.isdir("/proc/self/task") else None
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(child) for child in f.read().split()]
        except FileNotFoundError:
            if task == str(pid) and not os.path.exists(f"/proc/{pid}/task/{task}/stat"):
                continue  # the thread ended while we looked
            return None
        except (OSError, ValueError):
            continue
    return found


def is_zombie(pid: int) -> bool:
    """Whether `pid` has exited and waits to be reaped (or is gone)."""
    fields = stat_fields(pid)
    return not fields or fields[0] in ("Z", "X")

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


def is_stopped(pid: int) -> bool:
    """Whether `pid` is stopped (state T or t): a rank that wrote its result waits so."""
    fields = stat_fields(pid)
    return bool(fields) and fields[0] in ("T", "t")


def written_bytes(pid: int) -> int | None:
    """Bytes `pid` has written through write-like system calls (sockets and files), per the
    kernel — the code under test cannot hide from or edit this count. None without /proc."""
    try:
        with open(f"/proc/{pid}/io") as f:
            fields = dict(line.split(": ") for line in f.read().splitlines())
        return int(fields["wchar"])
    except (OSError, KeyError, ValueError):
        return None

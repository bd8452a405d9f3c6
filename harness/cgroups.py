"""A control group per launch: every process a launch starts is in it, and all end together.

The launcher moves the forkserver into a fresh group just while it forks the ranks, so every
rank — and whatever a rank starts, double-forked, `setsid` or not — is born inside; no process
can leave a cgroup it cannot write to. After the launch the group is ended as one: with
`cgroup.kill` (cgroup v2, Linux 5.14+), or by freezing it, killing every member and thawing
(v2 `cgroup.freeze`, v1 freezer), so a fork bomb cannot outrun the kill. The group also bounds
the launch: `pids.max` (a fork bomb) and the memory limit, per launch.

`Controller.detect(server_pid, ...)` finds which hierarchies this machine lets us write (as
root; cgroup v2, v1, or the hybrid of both) below the forkserver's own groups, so a container's
limits still hold. None usable (not root, macOS): `detect` returns None and the launcher falls
back to killing process trees (`harness.proctree`).
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from harness import procfs

_counter = itertools.count()
# Tasks (processes and threads) a rank may have: torch and gloo need a dozen or two. A launch
# gets this many per rank, at most the controller's `max_processes`: a fork bomb then fills
# its small group fast and fails, instead of hundreds of processes starving the machine.
TASKS_PER_RANK = 64


@dataclass(frozen=True)
class _Tree:
    """One mounted hierarchy: `kind` is "v2" or a v1 controller ("freezer", "pids",
    "memory"); `home` is the forkserver's group in it, where launch groups are made."""

    kind: str
    home: Path


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(mount point, root inside the hierarchy, fs type, super options) of every cgroup mount."""
    found = []
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        found.append((fields[4], fields[3], tail[0], set(tail[2].split(","))))
    return found


def _groups_of(pid: int) -> dict[str, str]:
    """{"v2" or controller name: path} from /proc/<pid>/cgroup."""
    groups: dict[str, str] = {}
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            groups["v2"] = parts[2]
        for name in parts[1].split(","):
            if name:
                groups[name] = parts[2]
    return groups


def _trees(pid: int) -> list[_Tree]:
    groups = _groups_of(pid)
    trees: list[_Tree] = []
    for point, root, fstype, options in _mounts():
        kinds = ["v2"] if fstype == "cgroup2" else [k for k in ("freezer", "pids", "memory")
                                                      if k in options]
        for kind in kinds:
            path = groups.get(kind)
            if path is None or not path.startswith(root):
                continue
            home = Path(point) / path[len(root):].lstrip("/")
            if home.is_dir() and all(t.kind != kind for t in trees):
                trees.append(_Tree(kind, home))
    return trees


def _write(path: Path, text: str) -> bool:
    try:
        path.write_text(text)
        return True
    except OSError:
        return False


class LaunchGroup:
    """The group (one folder per hierarchy) of one launch. Use: `enter(pid)` the forkserver,
    fork the ranks, `leave(pid)`; at the end `end()` (kill all, remove the folders)."""

    def __init__(self, folders: dict[str, Path], homes: dict[str, Path]) -> None:
        self.folders = folders
        self._homes = homes

    def enter(self, pid: int) -> None:
        for folder in self.folders.values():
            _write(folder / "cgroup.procs", str(pid))

    def leave(self, pid: int) -> None:
        for kind in self.folders:
            _write(self._homes[kind] / "cgroup.procs", str(pid))

    def members(self) -> set[int]:
        """Live (non-zombie) processes in the group."""
        found: set[int] = set()
        for folder in self.folders.values():
            try:
                text = (folder / "cgroup.procs").read_text()
            except OSError:
                continue
            found |= {int(p) for p in text.split()}
        return {p for p in found if (procfs.stat_fields(p) or ["Z"])[0] != "Z"}

    def kill(self) -> None:
        """SIGKILL every member at once: cgroup.kill, else freeze, kill, thaw."""
        v2 = self.folders.get("v2")
        if v2 is not None and _write(v2 / "cgroup.kill", "1"):
            return
        frozen = self._freeze(True)
        for pid in self.members():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if frozen:
            self._freeze(False)

    def _freeze(self, on: bool) -> bool:
        if "v2" in self.folders and (self.folders["v2"] / "cgroup.freeze").exists():
            return _write(self.folders["v2"] / "cgroup.freeze", "1" if on else "0")
        freezer = self.folders.get("freezer")
        if freezer is None or not _write(freezer / "freezer.state",
                                         "FROZEN" if on else "THAWED"):
            return False
        deadline = time.monotonic() + 1.0
        while on and time.monotonic() < deadline:  # FREEZING until every task has stopped
            try:
                if (freezer / "freezer.state").read_text().strip() == "FROZEN":
                    break
            except OSError:
                break
            time.sleep(0.002)
        return True

    def end(self, timeout: float = 2.0) -> set[int]:
        """Kill every member and remove the folders; returns the members still alive."""
        deadline = time.monotonic() + timeout
        alive = self.members()
        while alive and time.monotonic() < deadline:
            self.kill()
            time.sleep(0.005)
            alive = self.members()
        for folder in self.folders.values():
            for _ in range(50):  # the last exits can lag behind the kill for a moment
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
        return alive


@dataclass(frozen=True)
class Controller:
    """How this process makes launch groups: the hierarchies (kind, forkserver's home group)
    and the limits each launch gets. `applied` says what works, for the sandbox status."""

    trees: tuple[_Tree, ...]
    max_processes: int | None
    memory_bytes: int | None

    @classmethod
    def detect(cls, server_pid: int, *, max_processes: int | None,
               memory_bytes: int | None) -> Controller | None:
        """The hierarchies where a test group can be made, joined and removed; None if none.

        Kinds used: v2 (kill, freeze, limits), else the v1 freezer; v1 pids and memory for the
        limits v2 cannot set here."""
        usable = []
        for tree in _trees(server_pid):
            probe = tree.home / f"mlsys-{os.getpid()}-probe"
            try:
                probe.mkdir(exist_ok=True)
                probe.rmdir()
            except OSError:
                continue
            usable.append(tree)
        if any(t.kind == "v2" for t in usable):  # v2 kills and freezes by itself
            usable = [t for t in usable if t.kind != "freezer"]
        if not usable:
            return None
        return cls(tuple(usable), max_processes, memory_bytes)

    @property
    def can_kill(self) -> str:
        """How a launch's group is ended ("" when it cannot be, only watched)."""
        kinds = {t.kind for t in self.trees}
        if "v2" in kinds:
            return "cgroup.kill (v2)"
        return "freeze and kill (v1 freezer)" if "freezer" in kinds else ""

    def new_group(self, world_size: int | None = None) -> LaunchGroup:
        """A fresh group; `world_size` scales its process limit (TASKS_PER_RANK per rank)."""
        name = f"mlsys-{os.getpid()}-{next(_counter)}"
        folders: dict[str, Path] = {}
        homes: dict[str, Path] = {}
        for tree in self.trees:
            if (tree.kind == "pids" and self.max_processes is None) or \
                    (tree.kind == "memory" and self.memory_bytes is None):
                continue  # only there for a limit this process does not set
            folder = tree.home / name
            try:
                folder.mkdir()
            except OSError:
                continue
            folders[tree.kind], homes[tree.kind] = folder, tree.home
        v2 = folders.get("v2")
        limits: list[tuple[str, str, str]] = []
        if self.max_processes is not None:
            tasks = self.max_processes if world_size is None else \
                min(self.max_processes, TASKS_PER_RANK * world_size)
            limits.append(("pids", "pids.max", str(tasks)))
        if self.memory_bytes is not None:
            limits += [("memory", "memory.max", str(self.memory_bytes)),
                       ("memory", "memory.limit_in_bytes", str(self.memory_bytes))]
        for controller, filename, value in limits:
            if v2 is not None and (v2 / filename).exists():
                _write(v2 / filename, value)
            elif controller in folders and (folders[controller] / filename).exists():
                _write(folders[controller] / filename, value)
        if v2 is not None and (v2 / "memory.swap.max").exists():
            _write(v2 / "memory.swap.max", "0")
        return LaunchGroup(folders, homes)

    def limits_applied(self) -> list[str]:
        """What a fresh group actually gets here (made, read and removed once)."""
        group = self.new_group()
        applied = []
        try:
            for kind, folder in group.folders.items():
                for filename, label in (("pids.max", "processes"), ("memory.max", "memory"),
                                        ("memory.limit_in_bytes", "memory")):
                    path = folder / filename
                    try:
                        value = path.read_text().strip()
                    except OSError:
                        continue
                    if value and value != "max" and int(value) < 2**62:
                        shown = f"{int(value) / 2**30:g} GiB per launch" if label == "memory" \
                            else f"{TASKS_PER_RANK} per rank, {value} per launch"
                        applied.append(f"{label} ≤ {shown} (cgroup {kind})")
        finally:
            group.end()
        return applied

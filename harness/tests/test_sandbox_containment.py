"""Containment that holds in every mode, sandbox or not: a rank finds no input of its peers on
disk, and nothing a launch starts outlives it (a daemon fails the launch, named, and is killed).
The sandbox's own guarantees (users per rank, PID namespace, allow-listed files) are checked in
test_sandbox.py, which needs a fresh process."""

from __future__ import annotations

import os
import stat
import time

import pytest
import torch

from harness import SurvivorError, launch
from harness.tests.conftest_helpers import alive


def files_near_me(ctx, own: torch.Tensor):
    """What this rank can find around its own folder: readable files and their tensors."""
    folder = os.path.dirname(os.readlink("/proc/self/fd/1"))  # stdout goes to its log
    seen = {"folder": folder, "mode": stat.S_IMODE(os.stat(folder).st_mode), "files": [],
            "peer_tensors": 0}
    for root, _, files in os.walk(os.path.dirname(folder)):
        for name in files:
            path = os.path.join(root, name)
            seen["files"].append(os.path.relpath(path, os.path.dirname(folder)))
            try:
                loaded = torch.load(path, weights_only=False)
            except Exception:  # noqa: BLE001 - unreadable or not a torch file
                continue
            items = loaded if isinstance(loaded, (tuple, list)) else [loaded]
            seen["peer_tensors"] += sum(isinstance(i, torch.Tensor) and not torch.equal(i, own)
                                        for i in items)
    return seen


def setsid_daemon(ctx):
    """Rank 0 leaves a grandchild in a session of its own; its pid goes to the rank's log."""
    if ctx.rank == 0:
        read, write = os.pipe()
        if os.fork() == 0:
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                time.sleep(120)
                os._exit(0)
            os.write(write, str(grandchild).encode())
            os._exit(0)
        os.wait()
        print("daemon", os.read(read, 32).decode(), flush=True)
    return ctx.rank


def test_no_rank_finds_its_peers_inputs_on_disk():
    inputs = [torch.full((5,), 10.0 + r) for r in range(3)]
    result = launch(files_near_me, 3, rank_args=[(x,) for x in inputs])
    folders = set()
    for rank, seen in enumerate(result.values):
        assert seen["peer_tensors"] == 0, f"rank {rank} read a peer's input: {seen['files']}"
        assert seen["mode"] == 0o700, f"rank {rank}'s folder is {oct(seen['mode'])}"
        assert not any(name.endswith((".pkl", "args.pt")) for name in seen["files"]), seen
        folders.add(seen["folder"])
    assert len(folders) == 3, "every rank has a folder of its own"


@pytest.mark.parametrize("transport", ["in-rank", "sidecar"])
def test_a_setsid_daemon_fails_the_launch_by_name_and_is_killed(transport):
    started = time.monotonic()
    with pytest.raises(SurvivorError) as caught:
        launch(setsid_daemon, 2, timeout=30, transport=transport)
    # Under the sidecar the daemon holds its rank's connection open, and the sidecar writes its
    # log only once that closes: the daemon is ended first, not waited for (a minute, once).
    assert time.monotonic() - started < 45
    error = caught.value
    assert len(error.survivors) == 1, error.survivors
    assert "still running after the launch ended" in str(error)
    pid = int(error.survivors[0].split(":")[0].split()[1])
    time.sleep(0.2)
    assert not alive(pid), f"the daemon {pid} is still alive"


def test_an_honest_launch_after_a_survivor_is_clean():
    with pytest.raises(SurvivorError):
        launch(setsid_daemon, 2, timeout=30)
    assert launch(files_near_me, 2, rank_args=[(torch.ones(1),), (torch.zeros(1),)]).values


FORKER = ("import os, time\n"
          "for _ in range(20):\n"
          "    if os.fork() == 0:\n"
          "        os.setsid()\n"
          "        time.sleep(120)\n"
          "time.sleep(120)\n")


def _kinds() -> list[str]:
    """Each way this machine can end a group (v2 cgroup.kill, v1 freezer), tried alone."""
    from harness import cgroups

    if cgroups.Controller.detect(os.getpid(), max_processes=64, memory_bytes=None) is None:
        return ["none"]
    kinds = [t.kind for t in cgroups._trees(os.getpid())]
    return [k for k in kinds if k in ("v2", "freezer")] or ["none"]


@pytest.mark.parametrize("kind", _kinds())
def test_a_launch_group_ends_every_member_setsid_or_not(kind):
    import subprocess
    import sys

    from harness import cgroups

    if kind == "none":
        pytest.skip("no writable cgroup tree here (needs root): launches fall back to the "
                    "forkserver's subreaper")
    trees = tuple(t for t in cgroups._trees(os.getpid()) if t.kind in (kind, "pids"))
    group = cgroups.Controller(trees, 64, None).new_group()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)\n" + FORKER])
    try:
        group.enter(proc.pid)
        deadline = time.monotonic() + 20
        while len(group.members()) < 21 and time.monotonic() < deadline:
            time.sleep(0.05)
        members = group.members()
        assert len(members) == 21, f"{len(members)} members"
        assert group.end() == set()
        proc.wait(timeout=5)
        assert not any(alive(pid) for pid in members)
    finally:
        proc.kill()
        group.end()

"""Run as a script: enable the sandbox, launch probing ranks, print what they saw as JSON.

The sandbox is per process (it decides how the forkserver starts), so its tests run this in a
fresh interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile
import time

import torch
import torch.distributed as dist

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def probe(ctx, paths, planted):
    seen = {"uid": os.getuid(), "env": sorted(os.environ), "visible": {},
            "processes": len([p for p in os.listdir("/proc") if p.isdigit()])}
    seen["planted_visible"] = os.path.exists(planted)
    folder = os.path.dirname(os.readlink("/proc/self/fd/1"))
    peer = os.path.join(os.path.dirname(folder), f"rank{1 - ctx.rank}")
    try:
        os.listdir(peer)
        seen["peer_folder"] = "readable"
    except OSError:
        seen["peer_folder"] = "closed"
    for path in paths:
        try:
            seen["visible"][path] = len(os.listdir(path)) > 0
        except OSError:
            seen["visible"][path] = False
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=3).close()
        seen["internet"] = True
    except OSError:
        seen["internet"] = False
    try:
        with open(os.path.join(REPO, "README.md"), "a") as f:
            f.write("")
        seen["repo_writable"] = True
    except OSError:
        seen["repo_writable"] = False
    total = torch.ones(1) * (ctx.rank + 1)
    dist.all_reduce(total)  # gloo over loopback still works
    seen["all_reduce"] = float(total)
    return seen


def setsid_daemon(ctx):
    """Rank 0 leaves a grandchild in a session of its own, and returns only once it exists (so
    the rank's end cannot kill it before it escapes)."""
    if ctx.rank == 0:
        child = os.fork()
        if child == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(120)
            os._exit(0)
        os.waitpid(child, 0)
    return ctx.rank


def hog_memory(ctx, gigabytes):
    blocks = [torch.ones(2**27) for _ in range(int(gigabytes * 2))]  # 512 MiB each, touched
    return len(blocks)


def _plant() -> str:
    """A second copy of the course's solutions outside the checkout, readable by anyone."""
    for place in ("/var/tmp", os.path.dirname(REPO)):
        try:
            folder = tempfile.mkdtemp(prefix="mlsys-planted-", dir=place)
            break
        except OSError:
            continue
    target = os.path.join(folder, "course", "solutions")
    shutil.copytree(os.path.join(REPO, "solutions", "ring_allreduce"),
                    os.path.join(target, "ring_allreduce"))
    for root, _dirs, files in os.walk(folder):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    return target


def main() -> None:
    sys.path.insert(0, REPO)
    from harness import LaunchError, launch, procfs, sandbox

    os.environ["MLSYS_FAKE_TOKEN"] = "ghp_secret"
    planted = _plant()
    hidden = [os.path.join(REPO, "grader", "suites"), os.path.join(REPO, "solutions")]
    status = sandbox.enable(sandbox.SandboxConfig(hide=tuple(hidden), memory_bytes=2**30))
    report = {"status": status.to_plain()}
    try:
        # Outside the allow-list (sandbox.RANK_CHECKOUT) though not hidden by name.
        unlisted = [os.path.join(REPO, *part.split("/")) for part in
                    ("grader/tests/independent", "grader/instructor", ".git", "docs")]
        result = launch(probe, world_size=2, args=(hidden + unlisted
                                                   + [os.path.join(REPO, "harness")], planted))
    finally:
        shutil.rmtree(os.path.dirname(os.path.dirname(planted)), ignore_errors=True)
    report["ranks"] = result.values
    try:
        launch(setsid_daemon, world_size=2)
        report["daemon"] = "no error"
    except LaunchError as exc:
        report["daemon"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        # Alive: still running; a zombie has exited and only waits for its reaper.
        report["daemon_alive"] = [line for line in getattr(exc, "survivors", [])
                                  if not procfs.is_zombie(int(line.split(':')[0].split()[1]))]
    try:
        launch(hog_memory, args=(3,), timeout=60)
        report["memory"] = "allocated 3 GiB"
    except LaunchError as exc:
        report["memory"] = str(exc).splitlines()[0]
    print(json.dumps(report))


if __name__ == "__main__":
    main()

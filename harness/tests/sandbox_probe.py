"""Run as a script: enable the sandbox, launch probing ranks, print what they saw as JSON.

The sandbox is per process (it decides how the forkserver starts), so its tests run this in a
fresh interpreter.
"""

from __future__ import annotations

import json
import os
import socket
import sys

import torch
import torch.distributed as dist

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def probe(ctx, paths):
    seen = {"uid": os.getuid(), "env": sorted(os.environ), "visible": {}}
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


def hog_memory(ctx, gigabytes):
    blocks = [torch.ones(2**27) for _ in range(int(gigabytes * 2))]  # 512 MiB each, touched
    return len(blocks)


def main() -> None:
    sys.path.insert(0, REPO)
    from harness import LaunchError, launch, sandbox

    os.environ["MLSYS_FAKE_TOKEN"] = "ghp_secret"
    hidden = [os.path.join(REPO, "grader", "suites"), os.path.join(REPO, "solutions")]
    status = sandbox.enable(sandbox.SandboxConfig(hide=tuple(hidden), memory_bytes=2**30))
    report = {"status": status.to_plain()}
    result = launch(probe, world_size=2, args=(hidden + [os.path.join(REPO, "harness")],))
    report["ranks"] = result.values
    try:
        launch(hog_memory, args=(3,), timeout=60)
        report["memory"] = "allocated 3 GiB"
    except LaunchError as exc:
        report["memory"] = str(exc).splitlines()[0]
    print(json.dumps(report))


if __name__ == "__main__":
    main()

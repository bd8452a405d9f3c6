"""Helpers for the harness tests: which processes this test process has started."""

from __future__ import annotations

import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os

from harness import proctree, sidecar


def infrastructure_pids() -> set[int]:
    """The forkserver, the resource tracker and the sidecar server: long-lived by design,
    shared by all calls."""
    pids = set()
    if sidecar._server is not None and sidecar._server.proc.poll() is None:
        pids.add(sidecar._server.proc.pid)
    for obj, attr in ((multiprocessing.forkserver._forkserver, "_forkserver_pid"),
                      (multiprocessing.resource_tracker._resource_tracker, "_pid")):
        pid = getattr(obj, attr, None)
        if pid:
            pids.add(pid)
    return pids


def rank_processes() -> set[int]:
    """Live descendants of this process other than the infrastructure itself."""
    infra = infrastructure_pids()
    return proctree.descendants(os.getpid()) - infra


def alive(pid: int) -> bool:
    return pid in proctree.descendants(1) or os.path.exists(f"/proc/{pid}") and \
        "Z" not in open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]

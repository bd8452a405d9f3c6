"""The entry point of a rank process (forked from the forkserver, which preloads this module).

One job per process: isolate (own process group, a user of its own when the sandbox gives one,
not dumpable, die with the forkserver, capped file sizes), capture stdout/stderr into a file in
its own folder, arm faulthandler for the parent's SIGUSR1, join the process group through a
FileStore, install the communication log, run the rank function, and write either a plain-data
result or a JSON error description. Never anything else.

The rank function and the arguments arrive inside the job, through the forkserver's pipe: they
are never written to disk, and a rank is not dumpable, so a peer can read neither its files nor
its memory.
"""

from __future__ import annotations

import ctypes
import faulthandler
import io
import json
import os
import pickle
import random
import resource
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from harness import calltrace, funcol, payload
from harness.commlog import CommLog, Forbid
from harness.context import RankContext
from harness.errors import ForbiddenCallError
from harness.impl import ImplSpec

MIXED_NCCL = "cpu:gloo,cuda:nccl"  # an NCCL rank's group: CUDA tensors by NCCL, CPU by gloo
MAX_ERROR_CHARS = 20_000
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38


@dataclass(frozen=True)
class RankJob:
    """Everything a rank needs, sent parent -> rank (trusted direction) by the forkserver."""

    rank: int
    world_size: int
    backend: str
    workdir: str  # this rank's own folder (0700): its log, stack dump, result or error
    store_path: str  # the launch's rendezvous FileStore, the one file the ranks share
    impl: ImplSpec
    fn_qualname: str
    seed: int
    forbid: Forbid | None
    pg_timeout_s: float
    max_result_bytes: int
    max_file_bytes: int  # RLIMIT_FSIZE, in every rank
    max_processes: int | None  # RLIMIT_NPROC where ranks run as a user of their own (sandbox)
    fn_bytes: bytes = field(default=b"", repr=False)  # the rank function, pickled by the parent
    args_bytes: bytes = field(default=b"", repr=False)  # torch.save of (args, kwargs)
    rank_args_bytes: bytes | None = field(default=None, repr=False)  # this rank's own, or None
    uid: int | None = None  # the user this rank becomes (sandbox as root: one per rank)
    private_memory: bool = False  # not dumpable: where the parent can still read /proc/<pid>/io
    env: dict[str, str] = field(default_factory=dict)
    threads: int = 1  # torch intra-op threads; selfcheck's margin runs also try 2
    transport: str = "in-rank"  # or "sidecar": harness/sidecar.py carries the traffic
    sidecar_token: str = field(default="", repr=False)  # presented to this rank's sidecar
    trace_prefix: str = ""  # selfcheck's coverage: record the functions run from this folder
    # In-rank transport only: leave functional collectives available (harness/funcol.py); for
    # launches that judge values only. The sidecar carries and counts them anyway.
    functional_collectives: bool = False

    def path(self, suffix: str) -> str:
        return os.path.join(self.workdir, f"rank{self.rank}.{suffix}")


def _isolate(job: RankJob) -> None:
    os.setpgid(0, 0)  # our own process group: the parent can kill what we start
    if job.uid is not None:  # the forkserver keeps only CAP_SETUID/SETGID for this
        os.setgroups([])
        os.setresgid(job.uid, job.uid, job.uid)
        os.setresuid(job.uid, job.uid, job.uid)  # from root to another user: no capability left
    if sys.platform.startswith("linux"):
        try:
            prctl = ctypes.CDLL(None, use_errno=True).prctl
            # After the change of user, which clears the death signal and resets dumpable.
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # die with the forkserver
            if job.private_memory:  # peers of the same user cannot read our memory
                prctl(_PR_SET_DUMPABLE, 0)
            prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    limit = job.max_file_bytes
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    if job.max_processes is not None:  # sandboxed: cap this user's processes (fork bombs)
        resource.setrlimit(resource.RLIMIT_NPROC, (job.max_processes, job.max_processes))


def _capture_output(job: RankJob) -> Any:
    fd = os.open(job.path("log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        except (AttributeError, ValueError):
            pass
    stacks = open(job.path("stack"), "w")  # noqa: SIM115 - must stay open for faulthandler
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True, chain=False)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    return stacks


def _load_rank_function(job: RankJob) -> Any:
    return pickle.loads(job.fn_bytes)  # made by the parent: the trusted direction


def _seed_everything(seed: int, *, cuda: bool) -> None:
    random.seed(seed)
    if cuda:
        torch.manual_seed(seed)
    else:  # torch.manual_seed also queues a CUDA seeding, recording a stack each time
        torch.random.default_generator.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed % 2**32)
    except ImportError:
        pass


class RendezvousError(RuntimeError):
    """The rank could not join its process group; the rank function never ran."""


RENDEZVOUS_ERROR = RendezvousError.__name__  # the `exc_type` the parent retries on

_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000


def _leave_the_network() -> bool:
    """A network namespace of this rank's own, with nothing in it (not even loopback up): no
    socket to another rank. Needs root, or unprivileged user namespaces; False where neither
    works (the rank then shares the sandbox's loopback with the other ranks)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.unshare(_CLONE_NEWNET) == 0 or libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) == 0


def _run(job: RankJob) -> tuple[Any, CommLog]:
    os.environ.update(job.env)
    torch.set_num_threads(job.threads)
    _seed_everything(job.seed + job.rank,
                     cuda=job.backend == "nccl" or torch.cuda.is_available())
    device = torch.device("cpu")
    if job.backend == "nccl":
        torch.cuda.set_device(job.rank)
        device = torch.device("cuda", job.rank)
    store = dist.FileStore(job.store_path, job.world_size)
    # NCCL moves only CUDA tensors; suites also exchange CPU tensors (flags, counts, a CPU
    # model on one rank of a GPU machine), so an NCCL rank gets gloo for its CPU tensors.
    backend = MIXED_NCCL if job.backend == "nccl" else job.backend
    if job.transport == "sidecar":
        from harness import sidecar

        sidecar.connect_rank(sidecar.socket_path(job.workdir, job.rank), job.sidecar_token)
        _leave_the_network()
        backend = sidecar.BACKEND
    try:
        dist.init_process_group(backend, store=store, rank=job.rank,
                                world_size=job.world_size,
                                timeout=timedelta(seconds=job.pg_timeout_s))
    except Exception as exc:  # the parent makes the launch again (see launch)
        raise RendezvousError(f"joining the process group failed: {exc}") from exc
    if job.transport == "in-rank" and not job.functional_collectives:
        funcol.block()  # nothing would count them: not available (harness/funcol.py)
    log = CommLog(job.forbid)
    log.install()
    ctx = RankContext(rank=job.rank, world_size=job.world_size, local_rank=job.rank,
                      device=device, backend=job.backend, seed=job.seed, impl=job.impl.text,
                      _impl_spec=job.impl, _log=log)
    fn = _load_rank_function(job)
    # Made by the parent (trusted direction); tensors stay ordinary, not shared memory.
    args, kwargs = torch.load(io.BytesIO(job.args_bytes), weights_only=False)
    if job.rank_args_bytes is not None:
        args = tuple(args) + tuple(torch.load(io.BytesIO(job.rank_args_bytes),
                                              weights_only=False))
    if job.trace_prefix:
        calltrace.start(job.trace_prefix)
    value = fn(ctx, *args, **kwargs)
    return value, log


def _save_calls(job: RankJob) -> None:
    if job.trace_prefix:
        try:
            calltrace.save(job.path("calls.json"))
        except OSError:
            pass  # the parent then counts this launch's coverage as incomplete


_HARNESS_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _format_traceback(exc: BaseException) -> str:
    """The traceback without the harness's own frames (kept if nothing else is left)."""
    report = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    outside = [f for f in report.stack if os.path.dirname(f.filename) + os.sep != _HARNESS_DIR]
    if outside:
        report.stack = traceback.StackSummary.from_list(outside)
    return "".join(report.format())


def _write_error(job: RankJob, exc: BaseException) -> None:
    text = _format_traceback(exc)
    if isinstance(exc, SystemExit):
        message = f"called sys.exit({exc.code!r})"
    else:
        message = str(exc)
    report = {
        "type": type(exc).__name__,
        "message": message[:MAX_ERROR_CHARS],
        "traceback": text[-MAX_ERROR_CHARS:],
        "time": time.time(),
        "forbidden": isinstance(exc, ForbiddenCallError),
    }
    tmp = job.path("error.json.tmp")
    with open(tmp, "w") as f:
        json.dump(report, f)
    os.replace(tmp, job.path("error.json"))


def rank_entry(job: RankJob) -> None:
    """Process target. Exit status 0 with a result file, or 1 with an error file."""
    _isolate(job)
    _capture_output(job)
    status = 0
    try:
        value, log = _run(job)
        if job.transport == "sidecar":
            from harness import sidecar

            sidecar.disconnect()  # its wire log is written while we save the result
        _save_calls(job)
        value = payload.to_plain(value, "result")
        records = [r.to_plain() for r in log.records]
        payload.dump({"value": value, "comm": records}, job.path("result.pt"),
                     max_bytes=job.max_result_bytes)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        # Returned: wait, stopped, for the parent to read our write counter and end us.
        os.kill(os.getpid(), signal.SIGSTOP)
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the parent as text
        status = 1
        _save_calls(job)
        try:
            _write_error(job, exc)
        except BaseException:  # noqa: BLE001
            pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except BaseException:  # noqa: BLE001
            pass
    os._exit(status)

"""`launch`: run one function on N fresh rank processes and return what each returned.

Rank processes are forked from a forkserver that has torch and the harness preloaded (stdlib
multiprocessing 'forkserver' context), rendezvous through a FileStore in a fresh temp dir (no
ports), and are watched until all return, one fails, or the wall-clock limit passes. On a failure
the other ranks are killed at once; on a timeout every live rank's Python stack is dumped
(faulthandler) before the whole tree is killed. No rank process outlives the call.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.forkserver
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

import torch

from harness import payload, proctree, sandbox
from harness.commlog import CommRecord, Forbid
from harness.errors import (
    ForbiddenCallError,
    NotImplementedInRank,
    PayloadError,
    RankExit,
    RankFailure,
    RankTimeout,
)
from harness.impl import ImplSpec, resolve_impl
from harness.rankmain import RankJob, rank_entry
from harness.stacks import summarize_stack

PRELOAD = ["harness.rankmain", "cloudpickle", "numpy", "grader.compare"]
RANK_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "TORCH_SHOW_CPP_STACKTRACES": "0", "PYTHONFAULTHANDLER": "0"}
OUTPUT_TAIL_CHARS = 3000
STACK_DUMP_WAIT_S = 2.0
MAX_FILE_BYTES = 256 * 1024 * 1024
_rank_threads = 1


def set_rank_threads(threads: int) -> None:
    """Torch threads of every rank launched from now on (default 1, one per rank).

    Grading uses 1; `selfcheck` also runs the solutions with 2 to show that the tolerances do
    not depend on how a reduction is split over threads."""
    global _rank_threads
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"rank threads must be a positive int, not {threads!r}")
    _rank_threads = threads


@dataclass(frozen=True)
class LaunchResult:
    """What a launch returned, per rank: `values[r]`, `comm[r]` (list of CommRecord), and
    `written_bytes[r]`: bytes the kernel saw the rank write other than its own files (the
    transport traffic it sent, plus a few KiB of rendezvous), or None where /proc is missing.
    Unlike `comm`, which code under test could tamper with, this count is taken from outside.
    """

    values: list[Any]
    comm: list[list[CommRecord]]
    wall_s: float
    backend: str
    written_bytes: list[int | None]

    @property
    def world_size(self) -> int:
        return len(self.values)

    def unlogged_bytes(self, rank: int) -> int | None:
        """Bytes rank `rank` wrote beyond the point-to-point sends in its comm log.

        Near zero (a few KiB of rendezvous) for code that talks only through logged send/isend;
        large when it moved data some other way (an unwrapped collective, a raw socket).
        Meaningful only where every logged op is point-to-point. None without /proc.
        """
        written = self.written_bytes[rank]
        if written is None:
            return None
        sent = sum(r.bytes for r in self.comm[rank] if r.op in ("send", "isend"))
        return written - sent


_context: Any = None


@contextmanager
def _temporary_env(values: dict[str, str]):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def _rank_env() -> dict[str, str]:
    env = dict(RANK_ENV)
    if os.path.isdir("/sys/class/net/lo") and "GLOO_SOCKET_IFNAME" not in os.environ:
        env["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only: fast, and works without a network
    return env


def _write_interpreter(prefix: list[str], setup_lines: list[str]) -> str:
    """A wrapper that starts Python (under `prefix`, e.g. the sandbox) through harness/shim.py."""
    import shlex
    import sys

    shim = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim.py")
    folder = tempfile.mkdtemp(prefix="mlsys-interpreter-")
    os.chmod(folder, 0o755)
    path = os.path.join(folder, "python")
    command = [*prefix, sys.executable, "-I", shim]
    with open(path, "w") as f:
        f.write("\n".join(["#!/bin/sh", *setup_lines,
                           "exec " + " ".join(shlex.quote(a) for a in command) + ' "$@"']) + "\n")
    os.chmod(path, 0o755)
    return path


def preload(*modules: str) -> bool:
    """Have the forkserver import `modules` once, so no rank pays for them (e.g. torch._dynamo,
    which torch.optim imports on first use: seconds per rank). Call before the first launch;
    returns False (and changes nothing) once the forkserver runs."""
    if _context is not None:
        return False
    PRELOAD.extend(m for m in modules if m not in PRELOAD)
    return True


def mp_context() -> Any:
    """The forkserver context, started once per process with the rank environment."""
    global _context
    if _context is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        prefix, setup_lines = sandbox.interpreter_prefix()
        ctx.set_executable(_write_interpreter(prefix, setup_lines))
        with _temporary_env(_rank_env()), _spawn_preparation(sandbox.workdir_base()):
            multiprocessing.forkserver.ensure_running()
        _context = ctx
    return _context


@contextmanager
def _spawn_preparation(cwd: str | None = None):
    """Shape what multiprocessing tells a new rank about this process.

    `__main__` is hidden so the child does not re-run the parent's script (`python -m pytest`, a
    benchmark): rank functions travel by value instead. Under the sandbox the working directory
    is switched to one the rank can see, since the child starts by changing into it.
    """
    import sys
    import types

    saved = sys.modules.get("__main__")
    blank = types.ModuleType("__main__")
    blank.__spec__ = None
    sys.modules["__main__"] = blank
    old_cwd = os.getcwd() if cwd else None
    if cwd:
        os.chdir(cwd)
    try:
        yield
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved
        if old_cwd:
            os.chdir(old_cwd)


def resolve_backend(backend: str, world_size: int) -> str:
    """`auto`: NCCL when CUDA devices cover the world size, else gloo (CPU tensors)."""
    if backend == "auto":
        cuda = torch.cuda.is_available() and torch.cuda.device_count() >= world_size
        return "nccl" if cuda and torch.distributed.is_nccl_available() else "gloo"
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', not {backend!r}")
    return backend


BY_VALUE_PACKAGES = ("grader.suites",)


def _pickle_rank_function(fn: Callable) -> bytes:
    """The rank function, by value: ranks never import (or even see) the test module.

    The function's own module and hidden-suite packages are pickled by value (only what the
    function references travels, not the parent's expected-value code); everything else, such
    as torch and harness, by reference.
    """
    import sys

    import cloudpickle

    qualname = getattr(fn, "__qualname__", "")
    if not callable(fn) or "<locals>" in qualname or "<lambda>" in qualname or not qualname:
        raise ValueError(f"launch needs a module-level function, not {fn!r}: define it at the "
                         "top level of the test module")
    names = {fn.__module__} | {p for p in BY_VALUE_PACKAGES if p in sys.modules}
    names = {n for n in names if n in sys.modules and n != "__main__"}
    registered = []
    try:
        for name in names:
            try:
                cloudpickle.register_pickle_by_value(sys.modules[name])
                registered.append(name)
            except ValueError:  # already registered by a concurrent caller
                pass
        return cloudpickle.dumps(fn)
    finally:
        for name in registered:
            cloudpickle.unregister_pickle_by_value(sys.modules[name])


def _tail(path: str, chars: int = OUTPUT_TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - chars))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return ("…" + text) if size > chars else text


def _read_error(path: str) -> dict[str, Any] | None:
    try:
        if os.path.getsize(path) > 1_000_000:
            return {"type": "RankError", "message": "error report too large", "traceback": "",
                    "time": 0.0}
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(report, dict):
        return None
    return {"type": str(report.get("type", "Exception"))[:200],
            "message": str(report.get("message", ""))[:20_000],
            "traceback": str(report.get("traceback", ""))[:20_000],
            "time": float(report.get("time", 0.0)) if isinstance(report.get("time"),
                                                                 (int, float)) else 0.0}


def _failure(job: RankJob, report: dict[str, Any], world_size: int) -> RankFailure:
    rank, output = job.rank, _tail(job.path("log"))
    where = f"rank {rank} of {world_size}"
    kind, message = report["type"], report["message"]
    first_line = message.strip().splitlines()[0] if message.strip() else ""
    details = (f"\n--- {where}: traceback ---\n{report['traceback']}"
               f"\n--- {where}: output (last lines) ---\n{output or '(none)'}")
    fields = dict(rank=rank, exc_type=kind, message=message, traceback=report["traceback"],
                  output_tail=output)
    if kind == "NotImplementedError":
        return NotImplementedInRank(f"not implemented yet: {first_line or 'NotImplementedError'}"
                                    f" ({where}){details}", **fields)
    if kind == "ForbiddenCallError":
        return ForbiddenCallError(f"{where}: {first_line}{details}", **fields)
    if kind == "PayloadError":
        return PayloadError(f"{where}: {first_line}")
    if kind == "SystemExit":
        return RankExit(f"{where} {message} instead of returning; a rank function must return "
                        f"its result{details}", rank=rank, exitcode=None, output_tail=output)
    return RankFailure(f"{where} raised {kind}: {first_line}{details}", **fields)


def _exit_error(job: RankJob, exitcode: int | None, world_size: int) -> RankExit:
    where = f"rank {job.rank} of {world_size}"
    if exitcode is not None and exitcode < 0:
        import signal as _signal

        try:
            name = _signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        why = f"was killed by {name}"
        if name == "SIGKILL" and sandbox.status().mode != "off":
            why += " (over the sandbox's memory or process limit?)"
    elif exitcode == 0:
        why = "exited with status 0 without returning a result (os._exit in rank code?)"
    else:
        why = f"exited with status {exitcode} without returning a result (sys.exit or os._exit?)"
    output = _tail(job.path("log"))
    return RankExit(f"{where} {why}\n--- {where}: output (last lines) ---\n{output or '(none)'}",
                    rank=job.rank, exitcode=exitcode, output_tail=output)


def _collect_stacks(procs: list[Any], jobs: list[RankJob], live: set[int]) -> dict[int, str]:
    for r in live:
        try:
            os.kill(procs[r].pid, __import__("signal").SIGUSR1)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + STACK_DUMP_WAIT_S
    sizes: dict[int, int] = {}
    while time.monotonic() < deadline:
        now = {r: os.path.getsize(jobs[r].path("stack")) if os.path.exists(jobs[r].path("stack"))
               else 0 for r in live}
        if all(now[r] > 0 for r in live) and now == sizes:
            break
        sizes = now
        time.sleep(0.05)
    stacks = {}
    for r in sorted(live):
        text = _tail(jobs[r].path("stack"), 20_000).strip()
        stacks[r] = text or "(no stack: the rank did not answer SIGUSR1)"
    return stacks


def _timeout_error(fn_name: str, timeout: float, stacks: dict[int, str],
                   world_size: int) -> RankTimeout:
    lines = [f"{fn_name} did not finish within {timeout:g} s on {world_size} rank(s) "
             f"(deadlock or endless loop?); where each rank was:"]
    for r, text in stacks.items():
        lines.append(f"  rank {r}: {summarize_stack(text)}")
    for r, text in stacks.items():
        lines.append(f"--- rank {r}: stack at the timeout ---\n{text}")
    return RankTimeout("\n".join(lines), stacks=stacks, timeout=timeout)


def launch(fn: Callable[..., Any], world_size: int = 1, *, args: Sequence[Any] = (),
           kwargs: dict[str, Any] | None = None, rank_args: Sequence[Sequence[Any]] | None = None,
           impl: str | ImplSpec = "assignments", backend: str = "auto", timeout: float = 30.0,
           forbid: Forbid | None = None, seed: int = 0, env: dict[str, str] | None = None,
           max_result_bytes: int = payload.DEFAULT_MAX_BYTES) -> LaunchResult:
    """Run `fn(ctx, *args, *rank_args[r], **kwargs)` on `world_size` fresh rank processes.

    Returns a LaunchResult. Raises (in this process): NotImplementedInRank, RankFailure,
    ForbiddenCallError, RankExit, RankTimeout, PayloadError — see harness.errors. Raises
    ValueError for bad arguments (a nested function, a bad --impl, rank_args of wrong length).
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, not {world_size!r}")
    if rank_args is not None and len(rank_args) != world_size:
        raise ValueError(f"rank_args has {len(rank_args)} entries for {world_size} ranks")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, not {timeout}")
    fn_bytes = _pickle_rank_function(fn)
    qualname = fn.__qualname__
    spec = impl if isinstance(impl, ImplSpec) else resolve_impl(impl)
    chosen_backend = resolve_backend(backend, world_size)
    ctx = mp_context()
    workdir = tempfile.mkdtemp(prefix="mlsys-launch-", dir=sandbox.workdir_base())
    if sandbox.workdir_base():
        os.chmod(workdir, 0o777)  # ranks run as another user inside the sandbox
    procs: list[Any] = []
    started = time.monotonic()
    try:
        torch.save((tuple(args), dict(kwargs or {})), os.path.join(workdir, "args.pt"))
        with open(os.path.join(workdir, "fn.pkl"), "wb") as f:
            f.write(fn_bytes)
        jobs = [RankJob(rank=r, world_size=world_size, backend=chosen_backend, workdir=workdir,
                        impl=spec, fn_qualname=qualname,
                        seed=seed, forbid=forbid, pg_timeout_s=timeout + 30.0,
                        max_result_bytes=max_result_bytes, max_file_bytes=MAX_FILE_BYTES,
                        has_rank_args=rank_args is not None, env={**_rank_env(), **(env or {})},
                        threads=_rank_threads)
                for r in range(world_size)]
        if rank_args is not None:
            for job, extra in zip(jobs, rank_args):
                torch.save(tuple(extra), job.path("args.pt"))
        for job in jobs:
            proc = ctx.Process(target=rank_entry, args=(job,), name=f"mlsys-rank{job.rank}",
                               daemon=True)
            with _spawn_preparation(sandbox.workdir_base()):
                proc.start()
            procs.append(proc)
        written = _watch(procs, jobs, started + timeout, timeout, qualname)
        results = [payload.load(job.path("result.pt"), max_result_bytes) for job in jobs]
    finally:
        for proc in procs:
            if proc.pid is not None:
                proctree.kill_tree(proc.pid)
        for proc in procs:
            proc.join(timeout=5)
        shutil.rmtree(workdir, ignore_errors=True)
    values, comm = [], []
    for r, result in enumerate(results):
        if not isinstance(result, dict) or set(result) != {"value", "comm"}:
            raise PayloadError(f"rank {r}: malformed result file")
        values.append(result["value"])
        comm.append([CommRecord.from_plain(rec) for rec in result["comm"]])
    for r, records in enumerate(comm):
        bad = [rec for rec in records if rec.forbidden]
        if bad:
            rule = forbid.rule if forbid else ""
            raise ForbiddenCallError(
                f"rank {r} of {world_size} called torch.distributed.{bad[0].op}, which this "
                f"assignment forbids ({rule}); the call was caught inside the rank, but it "
                f"still counts", rank=r)
    return LaunchResult(values=values, comm=comm, wall_s=time.monotonic() - started,
                        backend=chosen_backend, written_bytes=written)


def _stopped(pid: int) -> bool:
    """Whether `pid` is stopped (state T): a rank that wrote its result waits so, for us."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        return stat[stat.rfind(")") + 2:].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def _written_bytes(pid: int) -> int | None:
    """Bytes `pid` has written through write-like system calls (sockets and files), per the
    kernel — the code under test cannot hide from or edit this count."""
    try:
        with open(f"/proc/{pid}/io") as f:
            fields = dict(line.split(": ") for line in f.read().splitlines())
        return int(fields["wchar"])
    except (OSError, KeyError, ValueError):
        return None


def _finish_rank(job: RankJob, pid: int) -> int | None:
    """The handshake: read the stopped rank's write counter, then end it.

    Returns the bytes it wrote other than its own files (output log, result): what went to the
    other ranks through the transport, plus a little rendezvous traffic. None without /proc.
    """
    written = _written_bytes(pid)
    proctree.kill_tree(pid)
    if written is None:
        return None
    own_files = 0
    for suffix in ("log", "result.pt", "stack", "error.json"):
        try:
            own_files += os.path.getsize(job.path(suffix))
        except OSError:
            pass
    return max(0, written - own_files)


def _watch(procs: list[Any], jobs: list[RankJob], deadline: float, timeout: float,
           fn_name: str) -> list[int | None]:
    """Wait for every rank; raise on the first failure, exit without result, or timeout.

    A rank that returned writes its result and stops itself; only then does it count as done
    (a rank that merely exits, even after forging a result file, has not returned). Returns the
    kernel's count of bytes each rank wrote (see `_finish_rank`).
    """
    world_size = len(procs)
    pending = {proc.sentinel: r for r, proc in enumerate(procs)}
    written: list[int | None] = [None] * world_size
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            live = set(pending.values())
            stacks = _collect_stacks(procs, jobs, live)
            raise _timeout_error(fn_name, timeout, stacks, world_size)
        for sentinel, r in list(pending.items()):
            if os.path.exists(jobs[r].path("result.pt")) and _stopped(procs[r].pid):
                written[r] = _finish_rank(jobs[r], procs[r].pid)
                del pending[sentinel]
        if not pending:
            break
        for sentinel in wait(list(pending), timeout=min(remaining, 0.01)):
            r = pending.pop(sentinel)
            procs[r].join()
            for other in pending.values():  # stop the others at once
                proctree.kill_tree(procs[other].pid)
            raise _first_failure(procs, jobs, r)
    return written


def _first_failure(procs: list[Any], jobs: list[RankJob], noticed: int) -> Exception:
    """The failure that came first: the earliest error report, else the rank noticed first."""
    world_size = len(procs)
    reports = []
    for job in jobs:
        report = _read_error(job.path("error.json"))
        if report is not None:
            reports.append((report["time"], job.rank, report))
    if reports:
        _, rank, report = min(reports, key=lambda item: (item[0], item[1]))
        return _failure(jobs[rank], report, world_size)
    procs[noticed].join(timeout=1)
    return _exit_error(jobs[noticed], procs[noticed].exitcode, world_size)

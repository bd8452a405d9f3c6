"""`launch`: run one function on N fresh rank processes and return what each returned.

Rank processes are forked from a forkserver that has torch and the harness preloaded (stdlib
multiprocessing 'forkserver' context), rendezvous through a FileStore in a fresh temp dir (no
ports), and are watched until all return, one fails, or the wall-clock limit passes. On a failure
the other ranks are killed at once; on a timeout every live rank's Python stack is dumped
(faulthandler) before the whole tree is killed. No rank process outlives the call.

Each rank gets the function and its arguments inside its job (never as files) and a private
folder for what it writes. The launch's processes share a control group where the machine
allows one (`harness.cgroups`); after the launch, anything of it still alive — a daemon that
left the rank's tree — fails the launch with `SurvivorError`, named, and is killed.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

import torch

from harness import (
    calltrace,
    cgroups,
    failures,
    forkserver,
    observers,
    payload,
    procfs,
    proctree,
    rankfiles,
    tempdirs,
)
from harness.cases import CASE_LOG_ENV
from harness.commlog import CommRecord, Forbid
from harness.errors import (
    DiskLimitError,
    ForbiddenCallError,
    PayloadError,
    RankFailure,
    SurvivorError,
)
from harness.forkserver import configure, mp_context, preload
from harness.impl import ImplSpec, resolve_impl
from harness.observers import observe_arguments
from harness.rankmain import RENDEZVOUS_ERROR, RankJob, rank_entry
from harness.sidecar import (
    SidecarSet,
    WireMismatchError,
    WireRecord,
    carried,
    check_against_wire,
    forbidden_on_wire,
    new_token,
)
from harness.sidecar import server as sidecar_server
from harness.stall import StallWatch

__all__ = ["LaunchResult", "configure", "launch", "mp_context", "observe_arguments", "preload",
           "resolve_backend", "set_rank_threads"]

MAX_FILE_BYTES = 256 * 1024 * 1024
# What one launch may keep on disk in its folder (every rank's folder, home and temp folder
# under the sandbox, and the rendezvous folder), by lstat and blocks; more for launches whose
# results alone could take more. Checked every DISK_CHECK_S by the parent, which ends the
# launch past it (DiskLimitError); RLIMIT_FSIZE (MAX_FILE_BYTES) caps each file meanwhile.
DISK_CAP_BYTES = 1024 * 1024 * 1024
DISK_MAX_ENTRIES = 20_000
DISK_CHECK_S = 0.25
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
    transport: str = "in-rank"
    # What the sidecars carried ("sidecar" only): operations that did not complete (a case's
    # abort released them, harness.cases) are left out here, after the checks that need them.
    wire: list[list[WireRecord]] | None = None

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
        if self.transport == "sidecar":  # the traffic went through a socket, not write(2)
            return written
        sent = sum(r.bytes for r in self.comm[rank] if r.op in ("send", "isend"))
        return written - sent


def resolve_backend(backend: str, world_size: int) -> str:
    """`auto`: NCCL when CUDA devices cover the world size, else gloo (CPU tensors)."""
    if backend == "auto":
        cuda = torch.cuda.is_available() and torch.cuda.device_count() >= world_size
        return "nccl" if cuda and torch.distributed.is_nccl_available() else "gloo"
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', not {backend!r}")
    return backend


def launch(fn: Callable[..., Any], world_size: int = 1, *, args: Sequence[Any] = (),
           kwargs: dict[str, Any] | None = None, rank_args: Sequence[Sequence[Any]] | None = None,
           impl: str | ImplSpec = "assignments", backend: str = "auto", timeout: float = 30.0,
           forbid: Forbid | None = None, seed: int = 0, env: dict[str, str] | None = None,
           max_result_bytes: int = payload.DEFAULT_MAX_BYTES,
           transport: str = "in-rank", functional_collectives: bool = False,
           stall_after: float | None = None) -> LaunchResult:
    """Run `fn(ctx, *args, *rank_args[r], **kwargs)` on `world_size` fresh rank processes.

    Returns a LaunchResult. Raises (in this process): NotImplementedInRank, RankFailure,
    ForbiddenCallError, RankExit, RankTimeout, PayloadError — see harness.errors. Raises
    ValueError for bad arguments (a nested function, a bad --impl, rank_args of wrong length).

    `transport="sidecar"` (gloo only: with it, `auto` means gloo even where GPUs exist): each
    rank's traffic is carried and logged by a sidecar process outside the rank
    (harness/sidecar.py); the launch
    then also raises ForbiddenCallError for a forbidden operation on the wire and
    WireMismatchError when a rank's log disagrees with what was carried. Functional collectives
    (`torch.distributed._functional_collectives`, `torch.ops._c10d_functional`) go around the
    in-rank log: the sidecar carries and counts them; with the in-rank transport they raise
    ForbiddenCallError in the rank unless `functional_collectives=True` (for launches that
    judge values only; harness/funcol.py).

    A launch whose ranks could not join their process group (gloo's connection set-up failing,
    as it rarely does on a loaded machine, before `fn` ran on any rank: `RENDEZVOUS_ERROR`) is
    made once more with fresh processes; the code under test never ran, so nothing is judged.

    `stall_after`: seconds every rank must be asleep before the launch is reported hung
    (harness/stall.py; default `STALL_AFTER_S`). A launch whose ranks wait on purpose — cases
    on process groups with their own collective timeout, which fail one case and let the
    launch go on — passes more than that timeout, so that only a real hang ends it, whatever
    the machine's load.
    """
    if stall_after is not None and stall_after <= 0:
        raise ValueError(f"stall_after must be positive, not {stall_after}")
    started, outcome = time.monotonic(), "ok"
    try:
        for attempt in range(RENDEZVOUS_ATTEMPTS):
            try:
                return _launch_once(fn, world_size, args=args, kwargs=kwargs,
                                    rank_args=rank_args, impl=impl, backend=backend,
                                    timeout=timeout, forbid=forbid, seed=seed, env=env,
                                    max_result_bytes=max_result_bytes, transport=transport,
                                    functional_collectives=functional_collectives,
                                    stall_after=stall_after)
            except RankFailure as exc:
                if exc.exc_type != RENDEZVOUS_ERROR or attempt == RENDEZVOUS_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")
    except BaseException as exc:
        outcome = type(exc).__name__
        raise
    finally:
        _trace_launch(fn.__qualname__, world_size, transport, time.monotonic() - started,
                      outcome)


TRACE_ENV = "MLSYS_LAUNCH_TRACE"  # a path: one JSON line per launch is appended to it


def _trace_launch(qualname: str, world_size: int, transport: str, wall_s: float,
                  outcome: str) -> None:
    """Where `TRACE_ENV` names a file, append what this launch cost: its function, ranks,
    transport, wall seconds, outcome ("ok" or the error's type) and the pytest test it served.
    A profile of where a session's launches go, for the one who sets it; nothing else reads it.
    """
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    record = {"fn": qualname, "ranks": world_size, "transport": transport,
              "wall_s": round(wall_s, 4), "outcome": outcome,
              "test": os.environ.get("PYTEST_CURRENT_TEST", "")}
    try:
        with open(path, "a", encoding="utf-8") as trace:
            trace.write(json.dumps(record) + "\n")
    except OSError:
        pass


RENDEZVOUS_ATTEMPTS = 2


def _launch_once(fn: Callable[..., Any], world_size: int = 1, *, args: Sequence[Any] = (),  # noqa: C901
                 kwargs: dict[str, Any] | None = None,
                 rank_args: Sequence[Sequence[Any]] | None = None,
                 impl: str | ImplSpec = "assignments", backend: str = "auto",
                 timeout: float = 30.0, forbid: Forbid | None = None, seed: int = 0,
                 env: dict[str, str] | None = None,
                 max_result_bytes: int = payload.DEFAULT_MAX_BYTES,
                 transport: str = "in-rank",
                 functional_collectives: bool = False,
                 stall_after: float | None = None) -> LaunchResult:
    """One attempt of `launch` (same arguments)."""
    if transport not in ("in-rank", "sidecar"):
        raise ValueError(f"transport must be 'in-rank' or 'sidecar', not {transport!r}")
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, not {world_size!r}")
    if rank_args is not None and len(rank_args) != world_size:
        raise ValueError(f"rank_args has {len(rank_args)} entries for {world_size} ranks")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, not {timeout}")
    fn_bytes = forkserver.pickle_rank_function(fn)
    qualname = fn.__qualname__
    observers.notify((qualname, tuple(args), dict(kwargs or {}), rank_args))
    spec = impl if isinstance(impl, ImplSpec) else resolve_impl(impl)
    chosen_backend = resolve_backend(backend, world_size)
    if transport == "sidecar":
        # The sidecar carries CPU tensors over gloo; the cost it logs is the verdict, so it is
        # never quietly swapped for the in-rank log because a GPU happens to be there.
        if backend == "nccl":
            raise ValueError("transport='sidecar' carries CPU tensors over gloo; it cannot run "
                             "with backend='nccl'")
        chosen_backend = "gloo"
    args_bytes = _saved((tuple(args), dict(kwargs or {})))
    own_args = [None if rank_args is None else _saved(tuple(rank_args[r]))
                for r in range(world_size)]
    mp_context()  # starts the forkserver on the first launch of this process
    wrapper = forkserver.wrapper()  # the sandbox, if any: fixed once the forkserver runs
    uids = [None if wrapper is None or wrapper.rank_uid_base is None
            else wrapper.rank_uid_base + r for r in range(world_size)]
    if uids[-1] is not None and world_size > forkserver.RANK_UIDS:
        raise ValueError(f"world_size {world_size} is more than the sandbox's "
                         f"{forkserver.RANK_UIDS} rank users")
    owners = [uid if uid is not None else wrapper.folder_owner if wrapper else None
              for uid in uids]
    workdir, store_path = _make_folders(owners, forkserver.workdir_base())
    disk_cap = max(DISK_CAP_BYTES, world_size * 2 * max_result_bytes)
    # Under the sandbox each rank's home and temp folder are its own folder (0700, its user's):
    # no folder shared among ranks but the rendezvous, and all of it under the disk cap.
    private = () if wrapper is None else ("HOME", "TMPDIR")
    procs: list[Any] = []
    sidecars: SidecarSet | None = None
    starting: _Background | None = None
    tokens = [new_token() if transport == "sidecar" else "" for _ in range(world_size)]
    started = time.monotonic()
    group = _new_launch_group(world_size)
    early_survivors: list[str] = []
    failed = True
    wire_error: WireMismatchError | None = None
    try:
        jobs = [RankJob(rank=r, world_size=world_size, backend=chosen_backend,
                        workdir=os.path.join(workdir, f"rank{r}"), store_path=store_path,
                        impl=spec, fn_qualname=qualname, seed=seed, forbid=forbid,
                        pg_timeout_s=timeout + 30.0, max_result_bytes=max_result_bytes,
                        max_file_bytes=MAX_FILE_BYTES,
                        max_processes=_process_limit(wrapper, group),
                        fn_bytes=fn_bytes, args_bytes=args_bytes, rank_args_bytes=own_args[r],
                        uid=uids[r], private_memory=bool(wrapper and wrapper.private_memory),
                        env={**forkserver.rank_env(), **(env or {}),
                             **{key: os.path.join(workdir, f"rank{r}") for key in private},
                             CASE_LOG_ENV: os.path.join(
                                 workdir, f"rank{r}", f"rank{r}.{failures.CASE_LOG_SUFFIX}")},
                        threads=_rank_threads,
                        transport=transport, sidecar_token=tokens[r],
                        functional_collectives=functional_collectives,
                        trace_prefix=spec.root if spec.text == calltrace.traced_impl() else "")
                for r in range(world_size)]
        if transport == "sidecar":  # started while the ranks start: a rank waits for its own
            sidecar_server()  # on this thread: the server dies with the thread that started it
            starting = _Background(lambda: SidecarSet.start(
                [job.workdir for job in jobs], tokens, timeout + 30.0))
        _start(procs, jobs, group)
        if starting is not None:
            sidecars = starting.result()
        written = _watch(procs, jobs, started + timeout, timeout, qualname,
                         limited=wrapper is not None, group=group,
                         disk=(workdir, disk_cap),
                         helpers=sidecars.pids if sidecars is not None else (),
                         # A GPU wait may sleep without CPU: only CPU launches are watched.
                         watch_stalls=chosen_backend == "gloo" and not torch.cuda.is_available(),
                         stall_after=stall_after)
        results = [payload.load(job.path("result.pt"), max_result_bytes,
                                who=f"rank {job.rank} of {world_size}") for job in jobs]
        try:
            wire = _wire_records(sidecars, procs, group, early_survivors)
        except WireMismatchError as exc:
            # A process the rank left behind may hold its sidecar connection open, so the log is
            # never written: the survivor check below names that cause, this error otherwise.
            wire, wire_error = None, exc
        failed = False
    finally:
        if starting is not None and sidecars is None:
            sidecars = starting.result(raise_error=False)
        if sidecars is not None:
            sidecars.stop()
        if group is not None and failed:
            group.kill()  # everything at once: a tree walk is slow against a fork bomb
        proctree.kill_trees([proc.pid for proc in procs if proc.pid is not None])
        for proc in procs:
            proc.join(timeout=5)
        with _lock:
            _live_ranks.difference_update(proc.pid for proc in procs)
        survivors = early_survivors + _end_survivors(group)
        if spec.text == calltrace.traced_impl():
            calltrace.report(calltrace.read_ranks(
                os.path.join(workdir, f"rank{r}", f"rank{r}.calls.json")
                for r in range(world_size)))
        shutil.rmtree(workdir, ignore_errors=True)
        tempdirs.release(workdir)
        if survivors and not failed:
            raise _survivor_error(survivors, qualname)
    if wire_error is not None:
        raise wire_error
    values, comm = [], []
    for r, result in enumerate(results):
        if not isinstance(result, dict) or set(result) != {"value", "comm"}:
            raise PayloadError(f"rank {r}: malformed result file")
        values.append(result["value"])
        try:
            comm.append([CommRecord.from_plain(rec) for rec in result["comm"]])
        except (TypeError, ValueError, AttributeError) as exc:
            raise PayloadError(f"rank {r}: malformed communication log in its result file "
                               f"({type(exc).__name__})") from None
    for r, records in enumerate(comm):
        bad = [rec for rec in records if rec.forbidden]
        if bad:
            rule = forbid.rule if forbid else ""
            raise ForbiddenCallError(
                f"rank {r} of {world_size} called torch.distributed.{bad[0].op}, which this "
                f"assignment forbids ({rule}); the call was caught inside the rank, but it "
                f"still counts", rank=r)
    if wire is not None:
        _judge_wire(wire, comm, forbid)
    return LaunchResult(values=values, comm=comm, wall_s=time.monotonic() - started,
                        backend=chosen_backend, written_bytes=written, transport=transport,
                        wire=None if wire is None else [carried(records) for records in wire])


WIRE_LOG_QUICK_S = 1.0  # an idle machine's sidecars write their logs within a tenth of that


def _wire_records(sidecars: SidecarSet | None, procs: list[Any],
                  group: cgroups.LaunchGroup | None,
                  survivors: list[str]) -> list[list[WireRecord]] | None:
    """The sidecars' logs (None without sidecars). A sidecar writes its log when its rank's
    connection closes, and a process the rank left behind (a daemon) holds that connection
    open: when the logs are not there at once, such processes are ended (named in
    `survivors`, which the caller reports) before the long wait, which would otherwise last
    until its limit."""
    if sidecars is None:
        return None
    try:
        return sidecars.records(wait_s=WIRE_LOG_QUICK_S)
    except WireMismatchError:
        for proc in procs:
            proc.join(timeout=5)
        survivors += _sweep_survivors(group)[0]
        return sidecars.records()


def _judge_wire(wire: list[list[WireRecord]], comm: list[list[CommRecord]],
                forbid: Forbid | None) -> None:
    """The verdicts the sidecars' logs decide: forbidden operations, then a log that lies."""
    world_size = len(wire)
    if forbid is not None:
        for r, records in enumerate(wire):
            bad = forbidden_on_wire(records, forbid.forbids)
            if bad is not None:
                raise ForbiddenCallError(
                    f"rank {r} of {world_size} ran {bad.kind} on the wire, which this "
                    f"assignment forbids ({forbid.rule}); seen by the harness outside the rank",
                    rank=r)
    for r, records in enumerate(wire):
        check_against_wire(r, comm[r], records)


class _Background:
    """A call run on a thread of its own; `result()` joins it and returns (or raises) what it
    did."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._value = call()
            except BaseException as exc:  # noqa: BLE001 - handed to result()
                self._error = exc

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def result(self, raise_error: bool = True) -> Any:
        self._thread.join()
        if self._error is not None and raise_error:
            raise self._error
        return self._value


_lock = threading.Lock()
_live_ranks: set[int] = set()  # ranks of launches still running (launches may run in threads)
_controller: Any = False  # cgroups.Controller, None where none can be made; False: not yet


def _new_launch_group(world_size: int) -> cgroups.LaunchGroup | None:
    """A fresh control group for this launch, where this machine lets us make one."""
    global _controller
    with _lock:
        if _controller is False:
            server, wrapper = forkserver.server_pid(), forkserver.wrapper()
            _controller = server and cgroups.Controller.detect(
                server, max_processes=wrapper.max_processes if wrapper else None,
                memory_bytes=wrapper.memory_bytes if wrapper else None)
        return _controller.new_group(world_size) if _controller else None


def _process_limit(wrapper: forkserver.Wrapper | None,
                   group: cgroups.LaunchGroup | None) -> int | None:
    """RLIMIT_NPROC for each rank: it counts every process of the rank's user, so only where
    that user is the rank's own, or where no control group bounds the launch instead."""
    if wrapper is None or wrapper.max_processes is None:
        return None
    if wrapper.rank_uid_base is not None:
        return min(wrapper.max_processes, cgroups.TASKS_PER_RANK)
    if wrapper.folder_owner is not None and group is None:
        return wrapper.max_processes
    return None


def _start(procs: list[Any], jobs: list[RankJob], group: cgroups.LaunchGroup | None) -> None:
    """Fork the ranks, the forkserver inside the launch's group meanwhile: each rank is born in
    it, and so is everything it starts."""
    with _lock:
        server = forkserver.server_pid() if group is not None else None
        if group is not None and server is not None:
            group.enter(server)
        try:
            for job in jobs:
                procs.append(forkserver.start_process(rank_entry, (job,),
                                                      f"mlsys-rank{job.rank}"))
                _live_ranks.add(procs[-1].pid)
        finally:
            if group is not None and server is not None:
                group.leave(server)


SURVIVOR_GRACE_S = 1.0
KILLED_EXIT_WAIT_S = 5.0  # for killed survivors to exit before they are reported


def _end_survivors(group: cgroups.LaunchGroup | None) -> list[str]:
    """After the ranks are gone: what of the launch is still alive (its control group, and the
    processes below the forkserver that belong to no running launch), named, then killed; the
    control group is then ended."""
    named, found = _sweep_survivors(group)
    if group is not None:
        left = group.end()
        named += [f"pid {pid}: still alive after the kill" for pid in sorted(left - found)]
    return named


def _sweep_survivors(group: cgroups.LaunchGroup | None) -> tuple[list[str], set[int]]:
    """What of the launch is still alive after its ranks are gone, named, then killed (the
    control group stays). Killed ranks can take a moment to exit, so a process counts only if
    it is still there after `SURVIVOR_GRACE_S`."""
    deadline = time.monotonic() + SURVIVOR_GRACE_S
    while True:
        with _lock:
            running = set(_live_ranks)
        exclude = set(running)
        for pid in running:
            exclude |= proctree.descendants(pid)
        found = forkserver.stray_processes(exclude) | (group.members() if group else set())
        if not found or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    named = [f"pid {pid}: {' '.join(procfs.cmdline(pid))[:120] or '(no command line)'}"
             for pid in sorted(found)]
    for pid in found:
        proctree.kill_tree(pid)
    # A SIGKILLed process takes a moment to exit on a loaded machine: what is reported as
    # killed must not still be running when the error says so.
    proctree.wait_gone(found, timeout=KILLED_EXIT_WAIT_S)
    return named, found


def _survivor_error(survivors: list[str], fn_name: str) -> SurvivorError:
    return SurvivorError(
        f"{fn_name}: {len(survivors)} process(es) started by the ranks were still running after "
        f"the launch ended (a daemon, a double fork or setsid?); a rank function must not leave "
        f"processes behind. They were killed: " + "; ".join(survivors[:5]),
        survivors=survivors)


def _saved(value: Any) -> bytes:
    """`value` as torch.save bytes: tensors travel as plain data, not as shared memory."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _make_folders(uids: list[int | None], base: str | None) -> tuple[str, str]:
    """The launch's folder: one private folder per rank (0700, owned by the rank's user when it
    has one of its own) and the rendezvous store, the one file every rank may write.

    Returns (launch folder, store path). Nothing the parent gives a rank is written here: the
    function and the arguments travel inside the job."""
    workdir = tempdirs.make("mlsys-launch-", dir=base)
    os.chmod(workdir, 0o755)  # ranks of another user must reach their own folders
    for r, uid in enumerate(uids):
        folder = os.path.join(workdir, f"rank{r}")
        os.mkdir(folder, 0o700)
        if uid is not None:
            os.chown(folder, uid, uid)
    store = os.path.join(workdir, "rendezvous")
    os.mkdir(store)
    store_path = os.path.join(store, "store")
    with open(store_path, "wb"):
        pass
    if any(uid is not None for uid in uids):  # ranks of different users share this file
        os.chmod(store, 0o777)
        os.chmod(store_path, 0o666)
    return workdir, store_path


def _finish_rank(job: RankJob, pid: int) -> int | None:
    """The handshake: read the stopped rank's write counter, then end it.

    Returns the bytes it wrote other than its own files (output log, result): what went to the
    other ranks through the transport, plus a little rendezvous traffic. None without /proc.
    """
    written = procfs.written_bytes(pid)
    # Ended at once; what it may have started is ended with the launch's other processes
    # (`kill_trees` in `launch`, one scan of /proc for every rank), then the survivor check.
    proctree.kill_group(pid)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if written is None:
        return None
    # lstat, one link, blocks on disk (harness/rankfiles.py): a symlink, a hard link shared
    # with the rendezvous folder or a sparse truncate cancels none of the bytes written.
    own_files = rankfiles.own_bytes(job.path(suffix)
                                    for suffix in ("log", "result.pt", "stack", "error.json",
                                                   failures.CASE_LOG_SUFFIX))
    return max(0, written - own_files)


def _case_progress(jobs: list[RankJob]) -> tuple[int, ...]:
    """The size of every rank's case log (harness.cases; -1 where there is none): it grows as
    cases start and end. A rank can write its own log, so a rank that fakes progress only
    keeps its hang from being seen early: the launch's limit still ends it, as it ends a loop
    that spins."""
    sizes = []
    for job in jobs:
        try:
            sizes.append(os.stat(job.path(failures.CASE_LOG_SUFFIX)).st_size)
        except OSError:
            sizes.append(-1)
    return tuple(sizes)


def _check_disk(folder: str, cap: int, procs: list[Any], running: Any,
                group: cgroups.LaunchGroup | None) -> None:
    """End the launch (DiskLimitError) when its folder takes more than `cap` bytes on disk or
    holds more than `DISK_MAX_ENTRIES` entries."""
    used, entries = tempdirs.usage(folder, DISK_MAX_ENTRIES)
    if used <= cap and entries <= DISK_MAX_ENTRIES:
        return
    if group is not None:
        group.kill()
    proctree.kill_trees([procs[r].pid for r in running])
    what = (f"{used / 2**20:.0f} MiB" if used > cap
            else f"more than {DISK_MAX_ENTRIES} files and folders")
    raise DiskLimitError(
        f"the launch's ranks wrote {what} to their folders, over the cap of "
        f"{cap / 2**20:.0f} MiB and {DISK_MAX_ENTRIES} entries per launch; a rank function "
        f"must not fill the disk (return results, write no files)")


def _watch(procs: list[Any], jobs: list[RankJob], deadline: float, timeout: float,
           fn_name: str, *, limited: bool,
           group: cgroups.LaunchGroup | None = None,
           helpers: Sequence[int] = (), watch_stalls: bool = True,
           disk: tuple[str, int] | None = None,
           stall_after: float | None = None) -> list[int | None]:
    """Wait for every rank; raise on the first failure, exit without result, or timeout — or
    as soon as every rank still running (and every helper process, `helpers`: the sidecars)
    is found hung (harness/stall.py).

    A rank that returned writes its result and stops itself; only then does it count as done
    (a rank that merely exits, even after forging a result file, has not returned). Returns the
    kernel's count of bytes each rank wrote (see `_finish_rank`). `disk`: (the launch folder,
    its cap in bytes): past the cap (or `DISK_MAX_ENTRIES` entries) the launch is ended with
    DiskLimitError.
    """
    world_size = len(procs)
    pending = {proc.sentinel: r for r, proc in enumerate(procs)}
    written: list[int | None] = [None] * world_size
    stall = StallWatch() if stall_after is None else StallWatch(after=stall_after)
    next_disk_check = time.monotonic()
    while pending:
        if disk is not None and time.monotonic() >= next_disk_check:
            next_disk_check = time.monotonic() + DISK_CHECK_S
            _check_disk(disk[0], disk[1], procs, pending.values(), group)
        remaining = deadline - time.monotonic()
        hung = watch_stalls and stall.stalled([procs[r].pid for r in pending.values()]
                                              + list(helpers),
                                              progress=lambda: _case_progress(jobs))
        if remaining <= 0 or hung:
            live = set(pending.values())
            stacks = failures.collect_stacks(procs, jobs, live)
            raise failures.timeout_error(fn_name, timeout, stacks, world_size,
                                         stalled_s=stall.after if hung else None,
                                         cases=failures.current_cases(jobs, live))
        for sentinel, r in list(pending.items()):
            if os.path.exists(jobs[r].path("result.pt")) and procfs.is_stopped(procs[r].pid):
                written[r] = _finish_rank(jobs[r], procs[r].pid)
                del pending[sentinel]
        if not pending:
            break
        for sentinel in wait(list(pending), timeout=min(remaining, 0.01)):
            r = pending.pop(sentinel)
            procs[r].join()
            if group is not None:  # stop the others at once, whatever they started too
                group.kill()
            proctree.kill_trees([procs[other].pid for other in pending.values()])
            raise failures.first_failure(procs, jobs, r, limited=limited)
    return written

"""Many cases in one launch, each in its own error scope; and the parent's way back to the value.

Starting ranks is cheap but not free, so a suite runs many calls in one launch. If the first
exception ended the launch, one stub would sink every test of the launch, also those that never
call it. So each case runs in its own scope:

Rank side — `run_cases(ctx, [(name, fn), ...])` calls each `fn()` in order and returns
`{name: outcome}`, plain data. An outcome is `{"ok": True, "value": plain(fn())}` or
`{"ok": False, "error": {...}}` with the exception's `type`, `message`, `not_implemented`
(NotImplementedError), `function` (the innermost function of the code under test it came from,
else the innermost frame), `traceback` (its tail, without the harness's frames) and `time`.
`capture(fn)` is one such scope on its own.

Parent side — `case_value(outcome, what)` returns the value or raises: NotImplementedInRank
("not implemented yet: <function>…", what the plugin reports as not implemented) for a stub,
else RankFailure (an AssertionError) whose first line says which call raised what.
`case_values(rank_outcomes, name)` does it across ranks: a case that failed on any rank fails,
the earliest failure first; ranks that returned None for the case (not in its group) give None.

Keeping the ranks in step. A case that raised on one rank may leave the others inside a
collective it never joins. After each case, so, the ranks meet on the rendezvous store (not
through `torch.distributed`, so the meeting is neither logged nor subject to `Forbid`). A rank
whose case raised waits `abort_after` seconds for the others (a quarter second, or two where
the ranks had subgroups before their cases: see `ABORT_AFTER_S`); if they do not come, it takes
the ranks out of the collective (gloo): it shuts its connections to the other ranks, so a peer
blocked on it gets an error, fails the same case, shuts its own connections in turn, and comes
to the meeting. Under the sidecar transport (harness/sidecar.py) the rank holds no connection:
it asks its sidecar to shut the sidecar's own (`sidecar.abort`), which fails the peers' pending
operations the same way; their records in the wire log are marked aborted and left out of the
launch's `wire` (traffic that never happened), and before the rebuild every sidecar forgets its
groups (`sidecar.reset`). Every rank then builds a fresh default process group, and the launch
goes on with the next case: the case fails (on the earliest failure, the rank that raised
first), the cases before and after it keep their own outcomes. The rebuild destroys every
group: if the ranks had subgroups before their cases began (every rank's count is summed on the
store, so all decide alike), the cases after the failure cannot use them and are reported as
not run (`CaseNotRun`, naming the case that failed, its rank and its message) without running;
a subgroup built inside a case is that case's own. If the others still do not come within
`sync_timeout` (a loop outside any collective, or NCCL, whose peers cannot be woken this way),
the rank re-raises its exception, which ends the launch with that cause. (`launch_cases` then
makes the launch again without that case.) The usual failure, a stub, raises before any
communication on every rank alike, so it costs only its case and no rebuild. Every rank must
run the same cases in the same order; a case may opt out of the meeting
(`RankCase(meet=False)`), e.g. consecutive cases on disjoint subgroups that should run at the
same time.

A hang (or a crash) costs its case only. `run_cases` appends to a case log in the rank's folder
(the path is in `CASE_LOG_ENV`, set by the launcher) a line "start\t<name>" before each case
and "end\t<name>" after it; when a launch is ended as hung (the stall watch, or its limit) or
by a rank that failed outside a case's error scope (killed, exited, or giving up at a meeting
as above), the parent reads the last line of every rank's log (`LaunchError.cases`). The
parent side, `launch_cases(make, names)`, then blames the earliest case a rank was inside and
makes the launch again (`make(env)`, fresh processes) with that case left out (`SKIP_ENV`):
every other case runs again from the start, so the values, communication log and wire log a
test reads come whole from one launch that ended well (splicing two launches would break the
wire-against-log check, which is per launch). A ForbiddenCallError is never isolated. The
left-out case gets, on every rank, an outcome that raises what ended the launch (`case_values`),
its first line naming the case, and a case a rank left out unasked fails
as missing. What the rank writes can only choose which case is blamed and left out (it then
fails), never a passing outcome. A hang that no case can be blamed for (outside every case,
or a case already left out) ends the launch as before.

Also here: `plain(value)` (anything to plain data for the trip back), `Memo` (one launch per
key, its result or its error remembered) and `where(rank, world_size)` (the `[rank r of n]`
prefix of a message). The test-side factory of one-line tests over a shared launch is
`harness.case_tests`.
"""

from __future__ import annotations

import json
import numbers
import os
import re
import socket
import sys
import time
import traceback
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from harness import calltrace, observers
from harness.errors import (
    ForbiddenCallError,
    LaunchError,
    NotImplementedInRank,
    RankExit,
    RankFailure,
    RankTimeout,
)

__all__ = ["CASE_LOG_ENV", "SKIP_ENV", "Memo", "RankCase", "capture", "case_value",
           "case_values", "launch_cases", "plain", "run_cases", "shut_connections", "where"]

SYNC_TIMEOUT_S = 20.0
# How long a rank whose case raised waits for the others before it frees them: long where the
# ranks had subgroups before their cases (freeing them rebuilds the groups, and the later cases
# cannot run, so a peer that is merely slow must get the time to arrive by itself), short where
# they had none (a rebuild then changes no outcome: freeing a slow peer early only costs it the
# case, which has failed already).
ABORT_AFTER_S = 2.0
QUICK_ABORT_AFTER_S = 0.25
IMPL_PACKAGE = "mlsys_impl."  # harness.impl registers the code under test under this package
MAX_MESSAGE_CHARS = 2000
MAX_TRACEBACK_CHARS = 3000
MAX_PLAIN_DEPTH = 32
_HARNESS_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_meetings = [0]  # run_cases calls so far in this rank: names each call's store keys
CASE_LOG_ENV = "MLSYS_CASE_LOG"  # the rank's case log (see the module doc): set by the launcher
SKIP_ENV = "MLSYS_SKIP_CASES"  # a JSON list of case names that run_cases leaves out

T = TypeVar("T")


# ---- plain data -------------------------------------------------------------------------------

def plain(value: Any, _depth: int = 0) -> Any:
    """`value` as plain data: tensors detached, numbers as int/float, tuples as lists, dict keys
    kept when str or int (else str), anything else as "<TypeName>"."""
    import torch

    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if _depth > MAX_PLAIN_DEPTH:
        return "<too deep>"
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [plain(v, _depth + 1) for v in value]
    if isinstance(value, dict):
        return {(k if isinstance(k, (str, int)) else str(k)): plain(v, _depth + 1)
                for k, v in value.items()}
    return f"<{type(value).__name__}>"


# ---- rank side --------------------------------------------------------------------------------

@dataclass(frozen=True)
class RankCase:
    """One case: `fn()` under `name`; `meet=False` skips the ranks' meeting after it."""

    name: str
    fn: Callable[[], Any]
    meet: bool = True


def _function_of(exc: BaseException) -> str:
    """The innermost function of the code under test in `exc`'s traceback, else the innermost."""
    innermost, impl = "", ""
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        name = getattr(code, "co_qualname", code.co_name)
        innermost = name
        if str(tb.tb_frame.f_globals.get("__name__", "")).startswith(IMPL_PACKAGE):
            impl = name
        tb = tb.tb_next
    return impl or innermost


def _traceback_tail(exc: BaseException) -> str:
    report = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    outside = [f for f in report.stack if os.path.dirname(f.filename) + os.sep != _HARNESS_DIR]
    report.stack = traceback.StackSummary.from_list(outside)
    return "".join(report.format())[-MAX_TRACEBACK_CHARS:]


def error_data(exc: BaseException) -> dict[str, Any]:
    """What the parent learns of an exception: plain strings, a bool and a time."""
    return {"type": type(exc).__name__, "message": str(exc)[:MAX_MESSAGE_CHARS],
            "not_implemented": isinstance(exc, NotImplementedError),
            "function": _function_of(exc), "traceback": _traceback_tail(exc),
            "time": time.time()}


def capture(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Run `fn(*args, **kwargs)` in its own error scope; its outcome (see the module doc)."""
    try:
        return {"ok": True, "value": plain(fn(*args, **kwargs))}
    except Exception as exc:  # noqa: BLE001 - every failure is the case's outcome
        return {"ok": False, "error": error_data(exc)}


def _store() -> Any:
    from torch.distributed import distributed_c10d

    return distributed_c10d._get_default_store()


def shut_connections() -> None:
    """Shut every connected TCP socket of this process: gloo's connections to the other ranks
    (or, in a sidecar, to the other sidecars), so that a peer blocked in a collective with this
    process gets an error instead of waiting. Listening sockets stay (gloo aborts the process if
    its listener fails), and so do Unix sockets (a sidecar's connection to its rank)."""
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return  # no /proc: nothing is shut, and the peers' wait ends at `sync_timeout`
    for fd in fds:
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(int(fd)))
        except (OSError, ValueError):
            continue
        try:
            if sock.family in (socket.AF_INET, socket.AF_INET6) and \
                    sock.type == socket.SOCK_STREAM and sock.getpeername():
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # not connected (a listener) or already shut
        finally:
            sock.close()


def _sidecar() -> Any:
    """harness.sidecar where this rank's traffic goes through its sidecar, else None."""
    module = sys.modules.get("harness.sidecar")
    return module if module is not None and module.connected() else None


def _release_peers() -> None:
    """Make a peer's pending operation with this rank fail (see the module doc): gloo's
    connections shut here, or, under the sidecar transport, in this rank's sidecar."""
    sidecar = _sidecar()
    if sidecar is None:
        shut_connections()
        return
    try:
        sidecar.abort()
    except (RuntimeError, OSError, EOFError):
        pass  # the sidecar could not: the peers' wait ends at `sync_timeout`, as for NCCL


def _rebuild_group(store: Any, key: str) -> None:
    """A fresh default process group for every rank (all call it together), the old one and
    its subgroups destroyed; then wait until every rank has its connections up. Under the
    sidecar transport the sidecar forgets its groups first and rendezvouses the new ones under
    `key` (every rank passes the same)."""
    import torch
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    rank, world_size = dist.get_rank(), dist.get_world_size()
    sidecar = _sidecar()
    if sidecar is not None:
        backend = sidecar.BACKEND  # dist.get_backend() answers "gloo" for it
        seconds = getattr(distributed_c10d._get_default_group(), "timeout_s", None)
        timeout = timedelta(seconds=seconds) if seconds else timedelta(minutes=30)
        sidecar.reset(key)
    else:
        backend = dist.get_backend()
        timeout = distributed_c10d._get_default_group()._get_backend(
            torch.device("cpu")).options._timeout
    dist.destroy_process_group()
    dist.init_process_group(backend, store=dist.PrefixStore(f"{key}/group", store), rank=rank,
                            world_size=world_size, timeout=timeout)
    _arrive(store, f"{key}/rebuilt", world_size)
    store.wait([f"{key}/rebuilt/all"], timeout)


def _arrive(store: Any, key: str, world_size: int) -> None:
    """Count this rank in at `key`; the last one sets `key/all`."""
    if store.add(key, 1) == world_size:
        store.set(f"{key}/all", b"1")


def _can_abort() -> bool:
    import torch.distributed as dist

    if _sidecar() is not None:  # its sidecar shuts the connections (outside the sandbox)
        return True
    return dist.get_backend() == "gloo" and os.path.isdir("/proc/self/fd")


@dataclass(frozen=True)
class _Meeting:
    store: Any  # the rendezvous store of the launch, the same for every meeting of run_cases
    prefix: str  # this run_cases call's keys
    rank: int
    world_size: int
    sync_timeout: float
    abort_after: float | None  # None: ABORT_AFTER_S with subgroups from before, else quick


def _meet(m: _Meeting, key: str, pending: tuple[str, BaseException] | None) -> str:
    """Wait until every rank has reached `key` (see the module doc): a failed rank takes the
    others out of a collective after `abort_after` and gives up after `sync_timeout`; if any
    rank did so, every rank rebuilds the process group. Returns what freed the ranks ("" if
    nothing had to): "case '<name>' raised <type> on rank <r>: <its message>"."""
    store, abort_key = m.store, f"{key}/abort"
    _arrive(store, f"{key}/reached", m.world_size)  # `reached/all`: no rank is in a collective
    if pending is not None and _can_abort():
        if store.add(abort_key, 0) == 0:  # no rank has shut its connections yet
            _wait_for(store, f"{key}/reached/all", _abort_after(m))
        if not store.check([f"{key}/reached/all"]):
            # Not before every rank has its connections up: a peer still connecting would fail.
            store.wait([f"{m.prefix}/started/all"], timedelta(seconds=m.sync_timeout))
            # Counted before this rank arrives below, so every rank sees it once all have.
            if store.add(abort_key, 1) == 1:  # the first to free the others names why
                first = (str(pending[1]).strip().splitlines() or [""])[0]
                cause = (f"case {pending[0]!r} raised {type(pending[1]).__name__} on rank "
                         f"{m.rank}: {first}")
                store.set(f"{key}/cause", cause[:MAX_MESSAGE_CHARS].encode())
            _release_peers()
    _arrive(store, key, m.world_size)
    while True:
        try:
            store.wait([f"{key}/all"], timedelta(seconds=m.sync_timeout))
            break
        except Exception:  # noqa: BLE001 - torch raises a RuntimeError subclass on timeout
            if pending is not None:
                # The others are held elsewhere (a loop, or a collective that shutting this
                # rank's connections did not end): end the launch with the cause rather than
                # let them wait for ever.
                raise pending[1] from None
    if not store.add(abort_key, 0):
        return ""
    _rebuild_group(store, key)
    return bytes(store.get(f"{key}/cause")).decode(errors="replace")


def _abort_after(m: _Meeting) -> float:
    """Seconds a failed rank waits for the others before freeing them (see ABORT_AFTER_S)."""
    if m.abort_after is not None:
        return m.abort_after
    # Every rank has counted its subgroups once every rank has started.
    m.store.wait([f"{m.prefix}/started/all"], timedelta(seconds=m.sync_timeout))
    return ABORT_AFTER_S if m.store.add(f"{m.prefix}/subgroups", 0) else QUICK_ABORT_AFTER_S


def _wait_for(store: Any, key: str, seconds: float) -> bool:
    """Whether `key` is set within `seconds` (polled: the file store's own wait rounds its
    limit up to whole seconds)."""
    deadline = time.monotonic() + seconds
    while not store.check([key]):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True


def _subgroups() -> int:
    """Process groups of this rank besides the default one."""
    from torch.distributed import distributed_c10d

    default = distributed_c10d._get_default_group()
    return sum(1 for group in distributed_c10d._world.pg_map if group is not default)


def _not_run(cause: str) -> dict[str, Any]:
    message = (f"not run: {cause} -- while other ranks waited in a collective with it; freeing "
               f"them rebuilt the process groups, and the groups built before the cases are "
               f"gone")
    return {"ok": False, "error": {"type": "CaseNotRun", "message": message[:MAX_MESSAGE_CHARS],
                                   "not_implemented": False, "function": "", "traceback": "",
                                   "time": time.time()}}


def run_cases(ctx: Any, cases: Iterable[RankCase | tuple[str, Callable[[], Any]]], *,
              sync_timeout: float = SYNC_TIMEOUT_S,
              abort_after: float | None = None) -> dict[str, dict[str, Any]]:
    """Run each case in its own error scope, meeting the other ranks after each; {name: outcome}.

    Call it with the same cases in the same order on every rank (see the module doc).
    `abort_after`: seconds a rank whose case raised waits for the others before freeing them;
    None: `ABORT_AFTER_S` where the ranks had subgroups before their cases, else
    `QUICK_ABORT_AFTER_S`."""
    _meetings[0] += 1
    meeting = None
    if ctx.world_size > 1:
        meeting = _Meeting(_store(), f"mlsys-cases/{_meetings[0]}", ctx.rank, ctx.world_size,
                           sync_timeout, abort_after)
        meeting.store.add(f"{meeting.prefix}/subgroups", _subgroups())
        _arrive(meeting.store, f"{meeting.prefix}/started", ctx.world_size)  # connections up
    out: dict[str, dict[str, Any]] = {}
    pending: tuple[str, BaseException] | None = None  # a failure not yet followed by a meeting
    voided = ""  # what failed, once the later cases cannot run
    skip, log = _skipped(), _CaseLog(os.environ.get(CASE_LOG_ENV, ""))
    for index, case in enumerate(cases):
        if not isinstance(case, RankCase):
            case = RankCase(*case)
        if case.name in out:
            raise ValueError(f"two cases are named {case.name!r}; names must be unique")
        if case.name in skip:  # it hung in an earlier launch (launch_cases): every rank skips it
            continue
        if voided:
            out[case.name] = _not_run(voided)
            continue
        log.write("start", case.name)
        try:
            out[case.name] = {"ok": True, "value": plain(case.fn())}
        except Exception as exc:  # noqa: BLE001 - every failure is the case's outcome
            out[case.name] = {"ok": False, "error": error_data(exc)}
            pending = pending or (case.name, exc)
        log.write("end", case.name)
        if case.meet and meeting is not None:
            voided = _after_meeting(meeting, f"{meeting.prefix}/{index}", pending)
            pending = None
    if pending is not None and meeting is not None and not voided:
        _after_meeting(meeting, f"{meeting.prefix}/end", pending)
    return out


def _skipped() -> frozenset[str]:
    """The case names `SKIP_ENV` lists (none when unset or malformed)."""
    try:
        names = json.loads(os.environ.get(SKIP_ENV, "[]"))
    except ValueError:
        return frozenset()
    return frozenset(n for n in names if isinstance(n, str)) if isinstance(names, list) \
        else frozenset()


class _CaseLog:
    """The rank's case log (see the module doc): one flushed line per start and end of a case;
    nothing where no path is set or the file cannot be written."""

    def __init__(self, path: str) -> None:
        self._path = path

    def write(self, kind: str, name: str) -> None:
        if not self._path:
            return
        try:
            with open(self._path, "a", encoding="utf-8") as f:
                f.write(f"{kind}\t{name}\n")
        except OSError:
            self._path = ""


def _after_meeting(m: _Meeting, key: str, pending: tuple[str, BaseException] | None) -> str:
    """Meet; what failed when the groups were rebuilt and the launch had subgroups from before
    its cases, which are gone: the later cases cannot run. "" otherwise."""
    cause = _meet(m, key, pending)
    if cause and m.store.add(f"{m.prefix}/subgroups", 0):
        return cause  # every rank reads the same count, so every rank skips the same cases
    return ""


# ---- parent side ------------------------------------------------------------------------------

def where(rank: int, world_size: int, unit: str = "rank") -> str:
    """`[rank 2 of 4]`: where a message's finding is (`unit="stage"` for pipeline stages)."""
    return f"[{unit} {rank} of {world_size}]"


def _where(rank: int | None, world_size: int | None) -> str:
    if rank is None:
        return ""
    return f"rank {rank}" + (f" of {world_size}" if world_size else "")


def raise_error(error: Mapping[str, Any], what: str, *, rank: int | None = None,
                world_size: int | None = None) -> None:
    """Raise in the parent what a case raised in a rank (see the module doc)."""
    kind, message = str(error.get("type", "Exception")), str(error.get("message", ""))
    function, trace = str(error.get("function", "")), str(error.get("traceback", ""))
    first = message.strip().splitlines()[0] if message.strip() else ""
    where = _where(rank, world_size)
    context = ", ".join(part for part in (what, where) if part)
    details = f"\n--- {where or 'rank'}: traceback ---\n{trace}" if trace else ""
    fields: dict[str, Any] = dict(rank=-1 if rank is None else rank, exc_type=kind,
                                  message=message, traceback=trace, output_tail="")
    ended = error.get(ENDED_KEY)
    if isinstance(ended, LaunchError):  # built by launch_cases in this process, never by a rank
        raise _case_error(ended, what or "the case", message)
    if error.get("not_implemented"):
        if function and not first.startswith(function):
            first = f"{function}" + (f" ({first})" if first else "")
        cause = f"not implemented yet: {first or 'NotImplementedError'}"
        raise NotImplementedInRank(f"{cause} [{context}]{details}" if context else
                                   f"{cause}{details}", **fields)
    inside = f" in {function}" if function and function not in what else ""
    lead = f"[{where}] " if where else ""
    raise RankFailure(f"{lead}{what or 'the call'} raised {kind}{inside}: {first}{details}",
                      **fields)


def case_value(outcome: Mapping[str, Any] | None, what: str = "", *, rank: int | None = None,
               world_size: int | None = None) -> Any:
    """The value of one rank's outcome, or the case's exception raised here (see the module
    doc). `what` names the call for the message; None (the rank skipped the case) gives None."""
    if outcome is None:
        return None
    if outcome.get("ok"):
        return outcome.get("value")
    raise_error(outcome.get("error") or {}, what, rank=rank, world_size=world_size)
    return None  # unreachable: raise_error always raises


def case_values(rank_outcomes: Sequence[Mapping[str, Any] | None], name: str,
                what: str | None = None) -> list[Any]:
    """Every rank's value of case `name` (`rank_outcomes[r]` is what rank r's run_cases
    returned); if it failed on any rank, the earliest failure is raised."""
    world_size = len(rank_outcomes)
    outcomes = [None if per_rank is None else per_rank.get(name) for per_rank in rank_outcomes]
    failed = [(float((o.get("error") or {}).get("time", 0.0)), rank, o)
              for rank, o in enumerate(outcomes) if o is not None and not o.get("ok")]
    if failed:
        rank, outcome = earliest_cause([(t, r, o.get("error") or {}, o) for t, r, o in failed])
        case_value(outcome, name if what is None else what,
                   rank=rank if world_size > 1 else None, world_size=world_size)
    return [case_value(o) for o in outcomes]


def earliest_cause(failures: Sequence[tuple[float, int, Mapping[str, Any], T]]) -> tuple[int, T]:
    """(rank, item) of the failure to report from (time, rank, error report, item) tuples: the
    earliest, so that the cause comes before a peer's broken pipe; where lower ranks failed the
    same way (the same exception type and message but for its numbers: every rank raised it
    for itself), the lowest of them, so that the rank named does not depend on which rank the
    machine's load let raise first."""
    first = min(failures, key=lambda item: (item[0], item[1]))
    same = [item for item in failures if _shape(item[2]) == _shape(first[2])]
    lowest = min(same, key=lambda item: item[1])
    return lowest[1], lowest[3]


def _shape(error: Mapping[str, Any]) -> tuple[str, str]:
    message = str(error.get("message", ""))
    return str(error.get("type", "")), re.sub(r"\d+", "#", message)


# ---- hangs: the launch again without the hung case ----------------------------------------------

ENDED_KEY = "ended"  # an error's key holding what ended the launch in a left-out case (parent)
MISSING = "CaseMissing"


def _case_error(exc: LaunchError, what: str, message: str) -> LaunchError:
    """`exc`, the error that ended a launch inside case `what`, again with a first line that
    names the case (`message`: see `_ended_message`)."""
    if isinstance(exc, RankTimeout):
        return RankTimeout(f"{what} hung: {message}", stacks=exc.stacks, timeout=exc.timeout,
                           cases=exc.cases)
    if isinstance(exc, RankExit):
        return RankExit(f"{what}: {message}", rank=exc.rank, exitcode=exc.exitcode,
                        output_tail=exc.output_tail)
    if isinstance(exc, RankFailure):
        return type(exc)(f"{what}: {message}", rank=exc.rank, exc_type=exc.exc_type,
                         message=exc.message, traceback=exc.traceback,
                         output_tail=exc.output_tail)
    return exc


def _blamed(exc: LaunchError, names: Sequence[str], out: Iterable[str]) -> str | None:
    """The earliest of `names` (not already left `out`) that a live rank was inside."""
    inside = set(exc.cases.values())
    return next((n for n in names if n in inside and n not in set(out)), None)


def _ended_message(exc: LaunchError, name: str, world_size: int) -> str:
    """For a hang: who waited on what in case `name` (ranks past it named as finished), then
    the whole report of the launch that was ended; else that report."""
    if not isinstance(exc, RankTimeout):
        return str(exc)
    from harness.stacks import hang_headline

    finished = [r for r, inside in exc.cases.items() if inside != name]
    return f"{hang_headline(exc.stacks, world_size, finished)}\n{exc}"


def launch_cases(make: Callable[[dict[str, str]], Any], names: Sequence[str], *,
                 max_left_out: int | None = None) -> Any:
    """Make a launch of `run_cases` cases (`names`, in their order) so that a case that hangs,
    or ends its launch otherwise (a rank killed or exited inside it, or a rank whose case raised
    giving up on peers that never came to the meeting after it), costs only itself (see the
    module doc); the LaunchResult, with each left-out case's outcome on every rank an error
    that `case_values` raises as what ended the launch (RankTimeout, RankExit, RankFailure),
    its first line naming the case.

    `make(env)` launches (`harness.launcher.launch(..., env=env)`), the rank function calling
    `run_cases` once with cases named by `names`. An error no case can be blamed for is raised,
    as is a ForbiddenCallError (a forbidden call fails the whole launch) and every other error
    of a launch. At most `len(names) + 1` launches are made; with `max_left_out`, at most that
    many cases are left out, and the launch that ends early after them raises its error (every
    case then fails with it): for a launch whose hang only its time limit ends (one rank in a
    loop, not a deadlock the stall watch finds in seconds), each case left out costs a whole
    limit, and a bug that loops in every case would otherwise cost one limit per case."""
    import dataclasses

    hung: dict[str, LaunchError] = {}
    while True:
        env = {SKIP_ENV: json.dumps(sorted(hung))} if hung else {}
        try:
            result = make(env)
        except (RankTimeout, RankExit, RankFailure) as exc:
            name = None if isinstance(exc, ForbiddenCallError) else _blamed(exc, names, hung)
            if name is None or (max_left_out is not None and len(hung) >= max_left_out):
                raise
            hung[name] = exc
            continue
        values, world_size = [], len(result.values)
        for per_rank in result.values:
            got = dict(per_rank) if isinstance(per_rank, Mapping) else {}
            for name in names:
                if name in hung:
                    got[name] = {"ok": False, "error": {
                        "type": type(hung[name]).__name__, "time": 0.0,
                        "message": _ended_message(hung[name], name, world_size),
                        ENDED_KEY: hung[name]}}
                elif name not in got:
                    got[name] = {"ok": False, "error": {
                        "type": MISSING, "time": 0.0,
                        "message": "the rank returned no outcome for this case: run_cases "
                                   "must run every case on every rank"}}
            values.append(got)
        return dataclasses.replace(result, values=values)


# ---- one launch per key -----------------------------------------------------------------------

class Memo:
    """Expensive calls (launches) by key: the first `get` runs `make()`, later ones reuse its
    value, or raise again the AssertionError it raised (every LaunchError is one).

    Tests that judge aspects of one launch share it this way, and a launch that failed (a stub,
    a crash, a hang) fails each of them at once with the same reason. `explain(exc)` may
    rewrite a remembered error.

    `timeout(t)` is `t`: later launches are never given a shorter limit after a RankTimeout (it
    used to be `hang_timeout`, which suites still pass and which is ignored). A shortened wall
    clock can end a correct launch on a loaded machine, and a deadlock needs none: the stall
    watch finds it in seconds (`harness.stall`), and `launch_cases` leaves the hung case out.
    """

    def __init__(self, *, explain: Callable[[AssertionError], AssertionError] | None = None,
                 hang_timeout: float | None = None) -> None:
        self._outcomes: dict[Hashable, Any] = {}
        self._ran: dict[Hashable, calltrace.Coverage] = {}
        self._sent: dict[Hashable, list[Any]] = {}
        self._explain = explain
        del hang_timeout  # ignored: see the class doc
        self.seen_timeout = False

    def timeout(self, seconds: float) -> float:
        """`seconds`, also after a timeout here (see the class doc)."""
        return seconds

    def get(self, key: Hashable, make: Callable[[], T]) -> T:
        if key not in self._outcomes:
            with calltrace.collecting() as ran, observers.recording_arguments() as sent:
                try:
                    self._outcomes[key] = make()
                except AssertionError as exc:
                    self.seen_timeout |= isinstance(exc, RankTimeout)
                    self._outcomes[key] = self._explain(exc) if self._explain else exc
            self._ran[key], self._sent[key] = ran, sent
        else:  # what the launch ran and was sent count for every test that reuses it
            # (selfcheck's coverage; the leak check's ledger, which files a launch's arguments
            # under the test that reads it)
            calltrace.report(self._ran[key])
            observers.replay_arguments(self._sent[key])
        outcome = self._outcomes[key]
        if isinstance(outcome, AssertionError):
            raise outcome
        return outcome

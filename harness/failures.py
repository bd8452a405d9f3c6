"""What a failed launch raises: each rank's error report, exit or stack, turned into one error.

A rank that raised leaves a JSON error report; one that exited leaves only its exit status and
output log; on a timeout every live rank is asked (SIGUSR1) for its Python stack. The earliest
failure becomes the exception the parent raises, with the rank's traceback and output tail.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

from harness import rankfiles
from harness.cases import earliest_cause
from harness.errors import (
    ForbiddenCallError,
    LaunchError,
    NotImplementedInRank,
    PayloadError,
    RankExit,
    RankFailure,
    RankTimeout,
)
from harness.rankmain import RankJob
from harness.stacks import hang_headline, summarize_stack

OUTPUT_TAIL_CHARS = 3000
CASE_LOG_SUFFIX = "cases"  # rank<r>.cases in the rank's folder: harness.cases's case log
STACK_DUMP_WAIT_S = 2.0


def _tail(path: str, chars: int = OUTPUT_TAIL_CHARS) -> str:
    return rankfiles.tail(path, chars)


ERROR_REPORT_BYTES = 1_000_000


def _read_error(path: str) -> dict[str, Any] | None:
    try:
        text = rankfiles.read_text(path, ERROR_REPORT_BYTES)
    except rankfiles.RankFileError as exc:
        return {"type": "RankError", "message": f"error report refused: {exc.why}",
                "traceback": "", "time": 0.0}
    except OSError:
        return None
    try:
        report = json.loads(text)
    except ValueError:
        return None
    if not isinstance(report, dict):
        return None
    return {"type": str(report.get("type", "Exception"))[:200],
            "message": str(report.get("message", ""))[:20_000],
            "traceback": str(report.get("traceback", ""))[:20_000],
            "time": float(report.get("time", 0.0)) if isinstance(report.get("time"),
                                                                 (int, float)) else 0.0}


def _failure(job: RankJob, report: dict[str, Any], world_size: int) -> LaunchError:
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


def _exit_error(job: RankJob, exitcode: int | None, world_size: int, limited: bool) -> RankExit:
    where = f"rank {job.rank} of {world_size}"
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        why = f"was killed by {name}"
        if name == "SIGKILL" and limited:
            why += " (over the sandbox's memory or process limit?)"
    elif exitcode == 0:
        why = "exited with status 0 without returning a result (os._exit in rank code?)"
    else:
        why = f"exited with status {exitcode} without returning a result (sys.exit or os._exit?)"
    output = _tail(job.path("log"))
    return RankExit(f"{where} {why}\n--- {where}: output (last lines) ---\n{output or '(none)'}",
                    rank=job.rank, exitcode=exitcode, output_tail=output)


def collect_stacks(procs: list[Any], jobs: list[RankJob], live: set[int]) -> dict[int, str]:
    """Ask the `live` ranks for their Python stacks (faulthandler on SIGUSR1); {rank: text}."""
    for r in live:
        try:
            os.kill(procs[r].pid, signal.SIGUSR1)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + STACK_DUMP_WAIT_S
    sizes: dict[int, int] = {}
    while time.monotonic() < deadline:
        now = {r: rankfiles.size(jobs[r].path("stack")) for r in live}
        if all(now[r] > 0 for r in live) and now == sizes:
            break
        sizes = now
        time.sleep(0.05)
    stacks = {}
    for r in sorted(live):
        text = _tail(jobs[r].path("stack"), 20_000).strip()
        stacks[r] = text or "(no stack: the rank did not answer SIGUSR1)"
    return stacks


CASE_LOG_CHARS = 4096  # the tail of a rank's case log that the parent reads


def current_cases(jobs: list[RankJob], live: set[int]) -> dict[int, str]:
    """{rank: the case it is inside} for the `live` ranks, from the last line of the case log
    `harness.cases.run_cases` appends to ("start\t<name>" / "end\t<name>"): the name when that
    line is a start, else "". Hostile data: read capped, never followed through a link."""
    out: dict[int, str] = {}
    for r in sorted(live):
        lines = _tail(jobs[r].path(CASE_LOG_SUFFIX), CASE_LOG_CHARS).splitlines()
        last = lines[-1] if lines else ""
        kind, _, name = last.partition("\t")
        out[r] = name if kind == "start" else ""
    return out


def timeout_error(fn_name: str, timeout: float, stacks: dict[int, str],
                  world_size: int, stalled_s: float | None = None,
                  cases: dict[int, str] | None = None) -> RankTimeout:
    """The RankTimeout of a launch: where each rank was (summary first, then whole stacks).
    `stalled_s`: the launch was found hung before its limit (harness/stall.py); `cases`: the
    case each live rank was inside (`current_cases`)."""
    if stalled_s is None:
        why = "(deadlock or endless loop?)"
    else:
        why = (f"(a deadlock: every rank has been asleep for {stalled_s:g} s, using almost no "
               f"CPU, each waiting for something no rank will do)")
    # The first line is all a report keeps (cut to 200 characters): who waited on what first.
    lines = [f"{hang_headline(stacks, world_size)} — {fn_name} did not finish within "
             f"{timeout:g} s on {world_size} rank(s) {why}; where each rank was:"]
    for r, text in stacks.items():
        lines.append(f"  rank {r}: {summarize_stack(text)}")
    for r, text in stacks.items():
        lines.append(f"--- rank {r}: stack at the timeout ---\n{text}")
    return RankTimeout("\n".join(lines), stacks=stacks, timeout=timeout, cases=cases)


def first_failure(procs: list[Any], jobs: list[RankJob], noticed: int, *,
                  limited: bool = False) -> LaunchError:
    """The failure that came first: the earliest error report, else the rank noticed first;
    its `cases` read from every rank's case log (`current_cases`).

    `limited`: the ranks ran under the sandbox's memory and process limits (a SIGKILL then
    hints at them)."""
    world_size = len(procs)
    reports: list[tuple[float, int, dict[str, Any], dict[str, Any]]] = []
    for job in jobs:
        found = _read_error(job.path("error.json"))
        if found is not None:
            reports.append((found["time"], job.rank, found, found))
    error: LaunchError
    if reports:
        rank, report = earliest_cause(reports)
        error = _failure(jobs[rank], report, world_size)
    else:
        procs[noticed].join(timeout=1)
        error = _exit_error(jobs[noticed], procs[noticed].exitcode, world_size, limited)
    error.cases = current_cases(jobs, set(range(world_size)))
    return error

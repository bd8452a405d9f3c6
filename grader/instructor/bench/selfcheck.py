"""Selfcheck's sessions: one pytest session per implementation vs one per assignment, side by side.

Both ways run the same implementation runs (solution, stub, the partial-credit variants, every
mutant stopping at its first failure, the margin runs) over the same suites, with the same
sessions at a time; the old way starts a pytest session for each, the new way
(grader/session/plugin.py, `--impl` repeated) grades an assignment's solution, stub, variants and
mutants in one and the margin runs of all assignments in one per variation. Printed: the wall time
and the CPU time (every process of the sessions, ranks included) of each way and the speed-up, where
the time went (interpreter start-up and collection, forkserver start, launches, the rest: fixtures,
references, judging), each assignment's cost both ways, and every mutant's verdict both ways
(each must still be caught). The worksheet check is the same in both and is timed once. The CPU
ratio holds on a machine that other work loads; the wall ratio is what an idle one gives.
Instructors only (needs grader/instructor). Never asserts on time.

    python -m grader bench selfcheck [ID ...] [--jobs 2] [--skip-worksheets]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grader.manifest import REPO_ROOT, load_manifest
from grader.report.render import format_table

TARGET_SPEEDUP = 3.0


@dataclass
class WayResult:
    """What one way of running the sessions cost, and the verdicts it reached."""

    wall_s: float = 0.0
    cpu_s: float = 0.0  # user + system seconds of every process the sessions started
    sessions: int = 0
    startup_s: float = 0.0  # interpreter, imports and collection, before the first test
    forkserver_s: float = 0.0
    launch_s: float = 0.0
    session_s: float = 0.0  # summed wall time of the sessions
    per_assignment: dict[str, float] = field(default_factory=dict)
    sessions_of: dict[str, int] = field(default_factory=dict)  # assignment -> sessions it used
    verdicts: dict[str, str] = field(default_factory=dict)  # run label -> verdict

    @property
    def other_s(self) -> float:
        return max(self.session_s - self.startup_s - self.forkserver_s - self.launch_s, 0.0)


def children_cpu_s() -> float:
    """CPU seconds of every reaped descendant of this process (orphans included, see
    `adopt_orphans`)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def adopt_orphans() -> bool:
    """Become the reaper of our orphaned descendants (a session's forkserver outlives the
    pytest process that is killed first), so their CPU time is counted here (Linux only)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # SUBREAPER
    except (OSError, AttributeError):
        return False


def reap_orphans() -> None:
    """Collect the orphans that ended; call only when no session is running (a session's own
    exit status must reach its Popen)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def verdict_of(job: Any, session: Any) -> str:
    """The short verdict a run reached: which test caught a mutant, `ok` or the first breach,
    the points a partial-credit variant kept."""
    from grader.instructor.selfcheck import judge_mutant, judge_solution, judge_stub

    if job.kind == "mutant":
        caught, problems = judge_mutant(session, job.impl.text)
        return caught.split(": caught by ")[-1].split(" (")[0] if caught \
            else f"NOT CAUGHT {problems[:1]}"
    if job.kind == "partial":
        run = session.result
        return f"{run.score}/{run.max_score} points" if run is not None else session.problem
    judge = judge_stub if job.kind == "stub" else judge_solution
    problems = judge(session)
    return "ok" if not problems else f"breach: {problems[0][:80]}"


def run_way(todo: list, together: bool, jobs: int, echo: Callable[[str], None]) -> WayResult:
    from grader.instructor.selfcheck import batches, run_all

    result = WayResult()
    sessions = batches(todo, together=together)

    def on_batch(batch, views) -> None:
        result.sessions += 1
        seen_wall = 0.0
        for job, session in views:
            seen_wall += session.wall_s
            result.verdicts[job.label] = verdict_of(job, session)
            result.per_assignment[job.assignment] = \
                result.per_assignment.get(job.assignment, 0.0) + session.wall_s
        for aid in {job.assignment for job, _ in views}:
            result.sessions_of[aid] = result.sessions_of.get(aid, 0) + 1
        first = views[0][1]
        timing = dict(first.result.timing) if first.result else {}
        result.session_s += seen_wall
        session_clock = timing.get("session", seen_wall)
        result.startup_s += max(seen_wall - session_clock, 0.0) + timing.get("collected", 0.0)
        result.forkserver_s += timing.get("forkserver_s", 0.0)
        result.launch_s += timing.get("launch_s", 0.0)
        echo(f"  {'new' if together else 'old'}: {batch.label} ({seen_wall:.1f} s)")

    cpu = children_cpu_s()
    start = time.perf_counter()
    run_all(sessions, on_batch, jobs=jobs, timeout=900.0, root=REPO_ROOT, suites=None,
            merge_margins=together)  # as selfcheck does
    result.wall_s = time.perf_counter() - start
    reap_orphans()
    result.cpu_s = children_cpu_s() - cpu
    return result


def ratio(old: float, new: float) -> str:
    return f"{old / new:.2f}x" if new > 0 else "-"


def report(old: WayResult, new: WayResult, worksheet: tuple[float, float],
           echo: Callable[[str], None]) -> int:
    """Print the comparison; 1 when a mutant escapes the new way, else 0."""
    rows = [[name, way.sessions, round(way.wall_s, 1), round(way.cpu_s, 1),
             round(way.startup_s, 1), round(way.forkserver_s, 1), round(way.launch_s, 1),
             round(way.other_s, 1)]
            for name, way in (("one session per implementation", old),
                              ("one session per assignment", new))]
    echo(format_table(["way", "sessions", "wall s", "CPU s", "start-up+collection s",
                       "forkserver s", "launches s", "other s"], rows))
    echo("(start-up .. other: wall seconds summed over sessions, which run side by side; "
         f"the worksheet check, the same either way: {worksheet[0]:.1f} s wall, "
         f"{worksheet[1]:.1f} s CPU)")
    speedup = old.wall_s / new.wall_s if new.wall_s else float("inf")
    verdict = "meets" if speedup >= TARGET_SPEEDUP else "misses"
    echo(f"\nspeed-up: {speedup:.2f}x wall ({verdict} the {TARGET_SPEEDUP:g}x target), "
         f"{ratio(old.cpu_s, new.cpu_s)} CPU")
    echo("\nper-assignment selfcheck cost (session seconds; side by side, so they add up to "
         "about twice the wall time):")
    ids = sorted(set(old.per_assignment) | set(new.per_assignment))
    echo(format_table(
        ["assignment", "old sessions", "old s", "new sessions", "new s", "ratio"],
        [[aid, old.sessions_of.get(aid, 0), round(old.per_assignment.get(aid, 0.0), 1),
          new.sessions_of.get(aid, 0), round(new.per_assignment.get(aid, 0.0), 1),
          ratio(old.per_assignment.get(aid, 0.0), new.per_assignment.get(aid, 0.0))]
         for aid in ids]))
    mutants = sorted(label for label in new.verdicts if " mutant:" in f" {label}")
    echo(f"\nmutants ({len(mutants)}), caught by (new way; old way where it differs):")
    for label in mutants:
        before, after = old.verdicts.get(label), new.verdicts[label]
        echo(f"  {label}: {after}" + ("" if before == after else f"   [old: {before}]"))
    differ = {k: (old.verdicts.get(k), v) for k, v in new.verdicts.items()
              if old.verdicts.get(k) != v and k not in mutants}
    if differ:
        echo("\nother verdicts that differ (old -> new):")
        for label, (before, after) in sorted(differ.items()):
            echo(f"  {label}: {before} -> {after}")
    same = not differ and all(old.verdicts.get(m) == new.verdicts[m] for m in mutants)
    echo("\nevery verdict is the same both ways" if same else "\nsome verdicts differ (above)")
    escaped = [k for k, v in new.verdicts.items() if v.startswith("NOT CAUGHT")]
    return 1 if escaped else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench selfcheck",
                                     description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("ids", nargs="*", metavar="ID", help="assignments (default: all)")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="sessions side by side")
    parser.add_argument("--skip-worksheets", action="store_true",
                        help="do not time the worksheet check (the same in both ways)")
    args = parser.parse_args(argv)
    try:
        from grader.instructor.partial import make_variants
        from grader.instructor.selfcheck import plan
    except ModuleNotFoundError:
        print("bench selfcheck needs grader/instructor (instructors' checkout, not a release)")
        return 2
    course = load_manifest(REPO_ROOT / "assignments" / "course.toml")
    adopt_orphans()
    variants = {a.id: make_variants(a, REPO_ROOT) for a in course.select(args.ids)}
    try:
        todo = plan(course, args.ids, REPO_ROOT, None, variants)

        def echo(line: str) -> None:
            print(line, flush=True)

        echo(f"bench selfcheck: {len(todo)} implementation runs over "
             f"{len({j.assignment for j in todo})} assignment(s), {args.jobs} sessions at a time")
        worksheet = (0.0, 0.0)
        if not args.skip_worksheets:
            from grader.instructor.worksheets import check_worksheets

            start, cpu = time.perf_counter(), children_cpu_s()
            check_worksheets(course.select(args.ids), REPO_ROOT, None, echo=lambda _line: None)
            reap_orphans()
            worksheet = (time.perf_counter() - start, children_cpu_s() - cpu)
        old = run_way(todo, together=False, jobs=args.jobs, echo=echo)
        new = run_way(todo, together=True, jobs=args.jobs, echo=echo)
        echo("")
        return report(old, new, worksheet, echo)
    finally:
        for found in variants.values():
            found.cleanup()


if __name__ == "__main__":
    raise SystemExit(main(__import__("sys").argv[1:]))

"""Selfcheck's sessions: one pytest session per implementation vs one per assignment, side by side.

Both ways run the same implementation runs (solution, stub, every mutant stopping at its first
failure, the margin runs) over the same suites, with the same 2 sessions at a time; the old way
starts a pytest session for each, the new way (grader/plugin.py, `--impl` repeated) grades an
assignment's solution, stub and mutants in one. Printed: the wall time of each way and the
speed-up, where the time went (interpreter start-up and collection, forkserver start, launches,
the rest: fixtures, references, judging), each assignment's cost the new way, and whether any
verdict differs (each mutant must still be caught). The worksheet check is the same in both and
is timed once. Instructors only (needs grader/instructor). Never asserts on time.

    python -m grader bench selfcheck [ID ...] [--jobs 2] [--skip-worksheets]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from grader.manifest import REPO_ROOT, load_manifest
from grader.reports import format_table

TARGET_SPEEDUP = 3.0


@dataclass
class WayResult:
    """What one way of running the sessions cost, and the verdicts it reached."""

    wall_s: float = 0.0
    sessions: int = 0
    startup_s: float = 0.0  # interpreter, imports and collection, before the first test
    forkserver_s: float = 0.0
    launch_s: float = 0.0
    session_s: float = 0.0  # summed wall time of the sessions
    per_assignment: dict[str, float] = field(default_factory=dict)
    verdicts: dict[str, str] = field(default_factory=dict)  # run label -> verdict

    @property
    def other_s(self) -> float:
        return max(self.session_s - self.startup_s - self.forkserver_s - self.launch_s, 0.0)


def run_way(todo: list, together: bool, jobs: int, echo: Callable[[str], None]) -> WayResult:
    from grader.instructor.selfcheck import batches, judge_mutant, judge_solution, run_all

    result = WayResult()
    sessions = batches(todo, together=together)

    def on_batch(batch, views) -> None:
        result.sessions += 1
        seen_wall = 0.0
        for job, session in views:
            seen_wall += session.wall_s
            if job.kind == "mutant":
                caught, problems = judge_mutant(session, job.impl.text)
                verdict = caught.split(": caught by ")[-1].split(" (")[0] if caught \
                    else f"NOT CAUGHT {problems[:1]}"
            else:
                problems = judge_solution(session) if job.kind in ("solution", "margin") else []
                verdict = "ok" if not problems else f"breach: {problems[0][:80]}"
            result.verdicts[job.label] = verdict
        first = views[0][1]
        timing = dict(first.result.timing) if first.result else {}
        result.session_s += seen_wall
        session_clock = timing.get("session", seen_wall)
        result.startup_s += max(seen_wall - session_clock, 0.0) + timing.get("collected", 0.0)
        result.forkserver_s += timing.get("forkserver_s", 0.0)
        result.launch_s += timing.get("launch_s", 0.0)
        aid = batch.jobs[0].assignment
        result.per_assignment[aid] = result.per_assignment.get(aid, 0.0) + seen_wall
        echo(f"  {'new' if together else 'old'}: {batch.label} ({seen_wall:.1f} s)")

    start = time.perf_counter()
    run_all(sessions, on_batch, jobs=jobs, timeout=900.0, root=REPO_ROOT, suites=None,
            merge_margins=together)
    result.wall_s = time.perf_counter() - start
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench selfcheck",
                                     description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("ids", nargs="*", metavar="ID", help="assignments (default: all)")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="sessions side by side")
    parser.add_argument("--skip-worksheets", action="store_true",
                        help="do not time the worksheet check (the same in both ways)")
    args = parser.parse_args(argv)
    try:
        from grader.instructor.selfcheck import plan
    except ModuleNotFoundError:
        print("bench selfcheck needs grader/instructor (instructors' checkout, not a release)")
        return 2
    course = load_manifest(REPO_ROOT / "assignments" / "course.toml")
    todo = plan(course, args.ids, REPO_ROOT, None)

    def echo(line: str) -> None:
        print(line, flush=True)

    echo(f"bench selfcheck: {len(todo)} implementation runs over "
         f"{len({j.assignment for j in todo})} assignment(s), {args.jobs} sessions at a time")
    worksheet_s = 0.0
    if not args.skip_worksheets:
        from grader.instructor.worksheets import check_worksheets

        start = time.perf_counter()
        check_worksheets(course.select(args.ids), REPO_ROOT, None, echo=lambda _line: None)
        worksheet_s = time.perf_counter() - start
    old = run_way(todo, together=False, jobs=args.jobs, echo=echo)
    new = run_way(todo, together=True, jobs=args.jobs, echo=echo)
    echo("")
    rows = [[name, way.sessions, round(way.wall_s, 1), round(way.startup_s, 1),
             round(way.forkserver_s, 1), round(way.launch_s, 1), round(way.other_s, 1)]
            for name, way in (("one session per implementation", old),
                              ("one session per assignment", new))]
    echo(format_table(["way", "sessions", "wall s", "start-up+collection s", "forkserver s",
                       "launches s", "other s"], rows))
    echo("(start-up .. other: summed over sessions, which run side by side; worksheet check "
         f"{worksheet_s:.1f} s, the same either way)")
    speedup = old.wall_s / new.wall_s if new.wall_s else float("inf")
    verdict = "meets" if speedup >= TARGET_SPEEDUP else "misses"
    echo(f"\nspeed-up: {speedup:.2f}x ({verdict} the {TARGET_SPEEDUP:g}x target)")
    echo("\nper-assignment selfcheck cost, new way (session seconds, side by side):")
    echo(format_table(["assignment", "seconds"],
                      [[aid, round(s, 1)] for aid, s in sorted(new.per_assignment.items())]))
    differ = {k: (old.verdicts.get(k), v) for k, v in new.verdicts.items()
              if old.verdicts.get(k) != v}
    if differ:
        echo("\nverdicts that differ (old -> new):")
        for label, (before, after) in sorted(differ.items()):
            echo(f"  {label}: {before} -> {after}")
    else:
        echo("\nevery verdict is the same both ways (each mutant caught by the same test)")
    escaped = [k for k, v in new.verdicts.items() if v.startswith("NOT CAUGHT")]
    return 1 if escaped else 0


if __name__ == "__main__":
    raise SystemExit(main(__import__("sys").argv[1:]))


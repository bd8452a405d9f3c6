"""A student's waits, per assignment: public tests on a stub and on a finished assignment.

In a fresh student release (`grader release`, built into a temporary folder beside this
checkout's environment), for each assignment: `pytest assignments/<id>` and `make test
ARGS="<id>"` (which runs `python -m grader grade <id>`: the public tests, scored, and the
worksheet) on the stub as released, then the same two with the reference solution copied in
(a finished assignment); and, in this checkout, `python -m grader grade <id>` of the solution
with the hidden suites too (what the pull request's grading costs). Wall seconds each; the
target is a finished assignment's public tests answering in under 15 s on an idle machine.
Never asserts on time.

    python -m grader bench student [ID ...] [--target 15] [--only finished]

`--only finished` times the two waits of a finished assignment alone (what the target is
about); the others are shown as "-".
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.manifest import REPO_ROOT, load_manifest
from grader.report.render import format_table

TARGET_S = 15.0
WAITS = ("pytest, stub", "make test, stub", "pytest, finished", "make test, finished",
         "grade with hidden, finished")


def timed(argv: list[str], cwd: Path, timeout: float = 900.0) -> float:
    """Wall seconds of one command (its exit status does not matter: failing tests on a stub
    are the student's normal state)."""
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return time.perf_counter() - start


def finish(release: Path, assignment_id: str, modules: tuple[str, ...]) -> None:
    """Copy the reference solution's editable modules over the release's stubs."""
    for module in modules:
        shutil.copyfile(REPO_ROOT / "solutions" / assignment_id / f"{module}.py",
                        release / "assignments" / assignment_id / f"{module}.py")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench student",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", metavar="ID", help="assignments (default: all)")
    parser.add_argument("--target", type=float, default=TARGET_S,
                        help=f"seconds a finished assignment's public tests may take "
                        f"(default {TARGET_S:g})")
    parser.add_argument("--only", choices=("finished",), default=None,
                        help="time only a finished assignment's public tests (pytest, make "
                             "test)")
    args = parser.parse_args(argv)
    from grader.instructor.release import build_release

    course = load_manifest()
    python = sys.executable
    rows = []
    with tempfile.TemporaryDirectory(prefix="mlsys-student-") as tmp:
        release = Path(tmp) / "course"
        built = build_release(REPO_ROOT, release, course)
        if built.leaks:
            print(f"error: the release leaks {len(built.leaks)} item(s); run grader release",
                  file=sys.stderr)
            return 1
        for assignment in course.select(args.ids):
            aid = assignment.id
            print(f"{aid}: ...", flush=True)
            pytest_cmd = [python, "-m", "pytest", "-q", f"assignments/{aid}"]
            make_cmd = [python, "-m", "grader", "grade", aid, "--out", "grading"]  # make test
            finished_only = args.only == "finished"
            waits: list[float | None] = [None, None] if finished_only else \
                [timed(pytest_cmd, release), timed(make_cmd, release)]
            finish(release, aid, tuple(assignment.modules))
            waits += [timed(pytest_cmd, release), timed(make_cmd, release)]
            waits.append(None if finished_only else timed(
                [python, "-m", "grader", "grade", aid, "--impl", "solutions", "--no-worksheets",
                 "--out", str(Path(tmp) / "grading")], REPO_ROOT))
            slow = max(waits[2] or 0.0, waits[3] or 0.0) > args.target
            shown = ["-" if w is None else f"{w:.1f}" for w in waits]
            rows.append([aid, *shown, "over" if slow else "ok"])
            print(f"{aid}: " + ", ".join(f"{name} {w} s" for name, w in zip(WAITS, shown)
                                         if w != "-"), flush=True)
    print()
    print(format_table(["assignment", *WAITS, f"finished < {args.target:g} s"], rows))
    return 0

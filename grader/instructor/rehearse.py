"""A local rehearsal of the grade workflow on a git repository: `python -m grader rehearse`.

    python -m grader rehearse --base REF --head REF [--repo DIR] [--out DIR]
                              [--suites-from CHECKOUT] [--sandbox strict|on] [--select EXPR]

Runs the steps `grade.yml` runs, in the same order and with the same code:
1. `pr-apply`: the head as data; its editable files copied into a clean tree of the base;
2. `pr-suites`: the hidden suites copied into the clean tree from `--suites-from` (a checkout
   of the private source repository, left in place here); without it the base's own
   `grader/suites/` (a self-study release or the source repository) or none at all;
3. `pr-grade`: the clean tree's grader, `python -I`, scrubbed environment, `--sandbox strict`;
4. `pr-comment`: the output validated and the comment rendered.
Only the API calls of `pr-post` are left out. The comment lands in OUT/comment.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grader.manifest import Course, load_manifest
from grader.pr.apply import FILES_JSON, PrFiles, PrFilesError, apply_pull_request
from grader.pr.comment import Rendered, render
from grader.pr.grade import NOTHING_TO_GRADE, install_suites, run_grade
from grader.report.render import format_table


@dataclass(frozen=True)
class Rehearsal:
    """What each step did, and the comment it ended with."""

    files: PrFiles
    grade_exit: int | None  # None: nothing to grade
    rendered: Rendered
    out: Path
    timings: tuple[tuple[str, float], ...]


def rehearse(repo: Path, base: str, head: str, out: Path, *, suites_from: Path | None = None,
             sandbox: str = "strict", select: str | None = None, workers: int = 2,
             echo: Callable[[str], None] = print) -> Rehearsal:
    """Run the grade workflow's steps for `base`..`head` of `repo`; reports go to `out`."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("results.json", "summary.md", "junit.xml", FILES_JSON, NOTHING_TO_GRADE):
        (out / stale).unlink(missing_ok=True)
    timings: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="mlsys-rehearse-") as work:
        tree = Path(work) / "clean"
        started = time.perf_counter()
        files = apply_pull_request(repo, base, head, tree)
        (out / FILES_JSON).write_text(files.to_json(), encoding="utf-8")
        timings.append(("pr-apply", time.perf_counter() - started))
        echo(f"pr-apply: {len(files.applied)} file(s) applied, {len(files.ignored)} ignored")

        started = time.perf_counter()
        if suites_from is not None:
            count = install_suites(suites_from, tree, keep_source=True)
            echo(f"pr-suites: {count} hidden-suite file(s) from {suites_from}")
        elif not (tree / "grader" / "suites").is_dir():
            echo("pr-suites: no hidden suites (give --suites-from); grading public tests only")
        timings.append(("pr-suites", time.perf_counter() - started))

        started = time.perf_counter()
        grade_exit = None
        if files.assignments:
            echo(f"pr-grade: {', '.join(files.assignments)} with --sandbox {sandbox}")
            grade_exit = run_grade(tree, out, files.assignments, sandbox=sandbox,
                                   select=select, workers=workers)
        else:
            (out / NOTHING_TO_GRADE).write_text("no editable file changed\n")
            echo("pr-grade: nothing to grade")
        timings.append(("pr-grade", time.perf_counter() - started))

        started = time.perf_counter()
        course = load_manifest(tree / "assignments" / "course.toml")
        rendered = render(out, course)
        (out / "comment.md").write_text(rendered.comment, encoding="utf-8")
        (out / "check.json").write_text(rendered.check_json(), encoding="utf-8")
        timings.append(("pr-comment", time.perf_counter() - started))
    return Rehearsal(files, grade_exit, rendered, out, tuple(timings))


# --- command line -----------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> None:
    """`python -m grader rehearse --base REF --head REF ...` (see the module docstring)."""
    parser = sub.add_parser("rehearse", help="run the grade workflow's steps on local git refs")
    parser.add_argument("--repo", type=Path, default=Path("."),
                        help="git repository holding both refs (default: .)")
    parser.add_argument("--base", required=True, help="the branch the pull request targets")
    parser.add_argument("--head", required=True, help="the pull request's head")
    parser.add_argument("--out", type=Path, default=Path("grading"),
                        help="reports, pr-files.json, comment.md, check.json (default: grading/)")
    parser.add_argument("--suites-from", type=Path, default=None, metavar="CHECKOUT",
                        help="checkout of the private source repository with grader/suites/")
    parser.add_argument("--sandbox", choices=("strict", "on"), default="strict",
                        help="strict, as in the workflow (default); on: allow degraded")
    parser.add_argument("--select", default=None, metavar="EXPR",
                        help="grade only the tests matching this pytest -k expression")
    parser.add_argument("-n", "--workers", type=int, default=2)
    parser.set_defaults(handler=_command)


def _command(args: argparse.Namespace, course: Course) -> int:
    try:
        done = rehearse(args.repo, args.base, args.head, args.out,
                        suites_from=args.suites_from, sandbox=args.sandbox, select=args.select,
                        workers=args.workers, echo=lambda line: print(line, flush=True))
    except (PrFilesError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = [[step, f"{seconds:.1f}"] for step, seconds in done.timings]
    print(format_table(["step", "seconds"], rows))
    print(f"{done.rendered.title} ({done.rendered.conclusion}); the comment is in "
          f"{done.out / 'comment.md'}")
    if done.grade_exit not in (None, 0):
        print(f"error: grading exited with {done.grade_exit}", file=sys.stderr)
        return 1
    return 0

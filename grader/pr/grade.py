"""Step 2 of grading a pull request: put the hidden suites in place, grade in a scrubbed process.

    python -m grader pr-suites --from PRIVATE_CHECKOUT --tree CLEAN
    python -m grader pr-grade --tree CLEAN --out OUT [--files OUT/pr-files.json] [ID ...]

`pr-suites` copies `grader/suites/` of the private source checkout into the clean tree (where
the sandbox hides it from rank processes) and deletes the rest of that checkout — solutions,
mutants and its `.git` — before any untrusted code runs.

`pr-grade` runs `python -m grader grade --sandbox strict` on the clean tree's own grader in a
new process whose environment holds only `SCRUBBED_ENV_KEYS` (no tokens, no `GITHUB_*`,
`ACTIONS_*` or `RUNNER_*` variables) and which starts with `python -I`; worksheets only with
`--worksheets` (nbgrader runs notebooks outside the rank sandbox). Without IDs it grades
the assignments whose files pr-apply took from the pull request; when there are none it grades
nothing and says so (the comment then lists what was ignored).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from grader.manifest import Course
from grader.pr.apply import FILES_JSON, load_pr_files

SCRUBBED_ENV_KEYS = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")
_BOOTSTRAP = ("import sys; sys.path.insert(0, {root!r}); from grader.cli import main; "
              "raise SystemExit(main())")
NOTHING_TO_GRADE = "nothing-to-grade"


def scrubbed_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Only the harmless variables of `environ` (default os.environ): no secret survives."""
    environ = os.environ if environ is None else environ
    env = {k: environ[k] for k in SCRUBBED_ENV_KEYS if k in environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    return env


def grade_command(tree: Path, out: Path, ids: Sequence[str], *, sandbox: str = "strict",
                  select: str | None = None, workers: int = 2,
                  worksheets: bool = False) -> list[str]:
    """argv of the isolated grading process: the clean tree's grader, `python -I`.

    Worksheets are left out unless asked for: nbgrader runs a student's notebook outside the
    rank sandbox, where it could read the hidden suites in the clean tree.
    """
    tree = tree.resolve()
    command = [sys.executable, "-I", "-c", _BOOTSTRAP.format(root=str(tree)), "--root", str(tree),
               "grade", *ids, "--impl", "assignments", "--out", str(out.resolve()),
               "--sandbox", sandbox, "-n", str(workers)]
    if select:
        command += ["--select", select]
    if not worksheets:
        command.append("--no-worksheets")
    return command


def install_suites(private: Path, tree: Path, *, keep_source: bool = False) -> int:
    """Copy `private/grader/suites` to `tree/grader/suites`; delete `private` unless kept.

    Returns the number of files copied. Raises FileNotFoundError when there are no suites.
    """
    source = private / "grader" / "suites"
    if not source.is_dir():
        raise FileNotFoundError(f"{source} is missing: is the private repository's path right, "
                                "and can the token read it?")
    target = tree / "grader" / "suites"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    if not keep_source:
        shutil.rmtree(private)
    return sum(1 for p in target.rglob("*") if p.is_file())


def run_grade(tree: Path, out: Path, ids: Sequence[str], *, sandbox: str = "strict",
              select: str | None = None, workers: int = 2, worksheets: bool = False,
              timeout: float = 3600.0, environ: Mapping[str, str] | None = None) -> int:
    """Grade in a scrubbed child process; its output streams through. Returns its exit code."""
    command = grade_command(tree, out, ids, sandbox=sandbox, select=select, workers=workers,
                            worksheets=worksheets)
    try:
        done = subprocess.run(command, cwd=tree, env=scrubbed_env(environ),
                              stdin=subprocess.DEVNULL, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        print(f"error: grading ran past {timeout:.0f} s", file=sys.stderr)
        return 1
    return done.returncode


# --- command line -----------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> None:
    """`pr-suites` and `pr-grade` (see the module docstring)."""
    suites = sub.add_parser("pr-suites", help="put the hidden suites of a private checkout into "
                            "the clean tree and delete the checkout")
    suites.add_argument("--from", dest="private", type=Path, required=True,
                        help="checkout of the private source repository")
    suites.add_argument("--tree", type=Path, required=True, help="the clean tree to grade")
    suites.add_argument("--keep-source", action="store_true",
                        help="do not delete the private checkout (local use only)")
    suites.set_defaults(handler=_suites_command)

    grade = sub.add_parser("pr-grade", help="grade the clean tree with --sandbox strict in a "
                           "scrubbed environment")
    grade.add_argument("ids", nargs="*", metavar="ID",
                       help=f"assignments (default: those with files applied in {FILES_JSON})")
    grade.add_argument("--tree", type=Path, required=True, help="the clean tree to grade")
    grade.add_argument("--out", type=Path, required=True, help="folder for the reports")
    grade.add_argument("--files", type=Path, default=None,
                       help=f"pr-apply's {FILES_JSON} (default: OUT/{FILES_JSON})")
    grade.add_argument("--sandbox", choices=("on", "strict"), default="strict",
                       help="strict (default) refuses to grade without the full sandbox")
    grade.add_argument("--select", default=None, metavar="EXPR",
                       help="grade only the tests matching this pytest -k expression")
    grade.add_argument("-n", "--workers", type=int, default=2)
    grade.add_argument("--worksheets", action="store_true",
                       help="also grade the nbgrader worksheets (they run outside the rank "
                       "sandbox: only where the hidden suites need no protection)")
    grade.set_defaults(handler=_grade_command)


def _suites_command(args: argparse.Namespace, course: Course) -> int:
    try:
        count = install_suites(args.private, args.tree, keep_source=args.keep_source)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{count} hidden-suite file(s) installed in {args.tree / 'grader' / 'suites'}")
    return 0


def _grade_command(args: argparse.Namespace, course: Course) -> int:
    ids = list(args.ids)
    files = args.files or args.out / FILES_JSON
    if not ids and files.is_file():
        ids = list(load_pr_files(files).assignments)
        if not ids:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / NOTHING_TO_GRADE).write_text("no editable file changed\n")
            print("the pull request changes no editable file: nothing to grade")
            return 0
    print(f"grading {', '.join(ids) or 'every assignment'} in {args.tree} "
          f"(scrubbed environment, python -I, --sandbox {args.sandbox})", flush=True)
    return run_grade(args.tree, args.out, ids, sandbox=args.sandbox, select=args.select,
                     workers=args.workers, worksheets=args.worksheets)

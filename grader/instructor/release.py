"""The student release: a repository students fork, with nothing of the instructor's in it.

    python -m grader release --out DIR [--hidden-suites-repo OWNER/NAME] [--self-study]

`build_release()` copies folders of this checkout — `assignments/`, `harness/` and `grader/`,
less the instructor's folders (`grader/instructor/`, `grader/suites/`, the tests) — and the
templates of `grader/instructor/release_files/` (student README, Makefile, pyproject,
workflows), then runs the leak check of `grader.instructor.release_leaks` on the result: a
release that contains any solution function body, mutant, or hidden test name or source is
refused (non-zero exit, every leak listed), and DIR is left for inspection. What is
instructor-only is said by where it lives, never by a list of module names.

`--self-study` also ships the hidden suites (the workflows then grade with them and need no
secret); solutions and mutants are never shipped.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from grader.instructor.release_leaks import INSTRUCTOR_PATHS, Leak, find_leaks
from grader.manifest import Course
from grader.report.render import format_table

TEMPLATES = Path(__file__).resolve().parent / "release_files"
# What a release holds: these folders and files of the source checkout, less the instructor's
# folders (release_leaks.INSTRUCTOR_PATHS: solutions/, grader/instructor/, grader/suites/, the
# tests); everything else stays behind.
SHIPPED_FOLDERS = ("assignments/", "harness/", "grader/")
SHIPPED_FILES = ("requirements.txt", "constraints.txt", "venv.mk", "conftest.py", ".gitignore")
SELF_STUDY_FOLDERS = ("grader/suites/",)  # shipped too with --self-study
SKIPPED_PARTS = ("__pycache__", ".pytest_cache", ".hypothesis")
_REPO_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")
REPO_PLACEHOLDER = "@HIDDEN_SUITES_REPO@"
# Without --hidden-suites-repo the grade workflow reads the repository variable.
REPO_FROM_VARIABLE = "${{ vars.HIDDEN_SUITES_REPO }}"


class ReleaseError(RuntimeError):
    """The release could not be written, or its leak check failed."""


@dataclass(frozen=True)
class Release:
    """What `build_release` wrote: `files` relative to `out`, and the leaks it found."""

    out: Path
    files: tuple[str, ...]
    leaks: tuple[Leak, ...]
    self_study: bool


def source_files(root: Path) -> list[str]:
    """The checkout's files as relative POSIX paths: git's view (tracked plus untracked, not
    ignored) when `root` is a git work tree, else a walk that skips caches and `.git`."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
             "--exclude-standard"], capture_output=True, check=True, timeout=60,
        ).stdout.decode("utf-8", "surrogateescape")
        files = [p for p in listed.split("\0") if p and (root / p).is_file()]
    except (OSError, subprocess.SubprocessError):
        files = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()
                 and ".git" not in p.relative_to(root).parts]
    return sorted(set(f for f in files if not set(Path(f).parts) & set(SKIPPED_PARTS)))


def is_shipped(path: str, *, self_study: bool = False) -> bool:
    """Whether the checkout's file `path` belongs in a student release."""
    if path in SHIPPED_FILES:
        return True
    if not path.startswith(SHIPPED_FOLDERS):
        return False
    if self_study and path.startswith(SELF_STUDY_FOLDERS):
        return True
    return not path.startswith(INSTRUCTOR_PATHS)


def build_release(root: Path, out: Path, course: Course, *, hidden_suites_repo: str = "",
                  self_study: bool = False) -> Release:
    """Write the student release of the checkout `root` into `out` and leak-check it.

    `out` must not exist or be empty. Raises `ReleaseError` for a bad argument; leaks are
    returned (the caller decides), never silently dropped.
    """
    if hidden_suites_repo and not _REPO_NAME.match(hidden_suites_repo):
        raise ReleaseError(f"--hidden-suites-repo {hidden_suites_repo!r} is not OWNER/NAME")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ReleaseError(f"{out} exists and is not an empty folder; choose a new --out")
    root, out = root.resolve(), out.resolve()
    if out.is_relative_to(root) and not out.is_relative_to(root / "release"):
        raise ReleaseError(f"{out} lies inside the checkout; use ./release/ (ignored) or a "
                           "folder elsewhere")
    written = []
    for path in source_files(root):
        if is_shipped(path, self_study=self_study):
            _copy(root / path, out / path)
            written.append(path)
    for template in sorted(p for p in TEMPLATES.rglob("*") if p.is_file()):
        relative = template.relative_to(TEMPLATES).as_posix()
        if any(part.startswith(".") and part != ".github" for part in Path(relative).parts) \
                or set(Path(relative).parts) & set(SKIPPED_PARTS):
            continue
        text = template.read_text(encoding="utf-8")
        text = _fill(text, course, hidden_suites_repo, self_study)
        relative = relative.removesuffix(".tmpl")  # live config files would act on this repo
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written.append(relative)
    leaks = find_leaks(root, out, allow_hidden_tests=self_study)
    return Release(out, tuple(sorted(set(written))), tuple(leaks), self_study)


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)


def _fill(text: str, course: Course, hidden_suites_repo: str, self_study: bool) -> str:
    """Fill a template's placeholders: the suites repository, the course name and tables."""
    repo = hidden_suites_repo or REPO_FROM_VARIABLE
    if self_study:
        repo = ""
    text = text.replace(REPO_PLACEHOLDER, repo)
    text = text.replace("@COURSE_NAME@", course.name).replace("@COURSE_VERSION@", course.version)
    text = text.replace("@EDITABLE_TABLE@", editable_table(course))
    mode = ("self-study: the hidden suites are in `grader/suites/` of this repository"
            if self_study else "course: the hidden suites are kept by your instructors")
    return text.replace("@RELEASE_MODE@", mode)


def editable_table(course: Course) -> str:
    """Markdown table: per assignment, the files a pull request may change (all else ignored)."""
    from grader.pr.apply import editable_paths

    lines = ["| # | assignment | files you edit (graded) | points |", "|---:|---|---|---:|"]
    by_assignment: dict[str, list[str]] = {}
    for path, assignment_id in editable_paths(course).items():
        by_assignment.setdefault(assignment_id, []).append(path)
    for number, a in enumerate(course.assignments, start=1):
        files = ", ".join(f"`{p}`" for p in sorted(by_assignment.get(a.id, [])))
        points = f"{a.points} + {a.worksheet_points} worksheet" if a.worksheet_points \
            else str(a.points)
        lines.append(f"| {number} | [{a.id}](assignments/{a.id}/README.md) — {a.title} "
                     f"| {files} | {points} |")
    return "\n".join(lines)


# --- command line -----------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> None:
    """`python -m grader release --out DIR [--hidden-suites-repo OWNER/NAME] [--self-study]`."""
    parser = sub.add_parser("release", help="write the student repository and leak-check it")
    parser.add_argument("--out", type=Path, required=True,
                        help="new or empty folder for the student repository")
    parser.add_argument("--hidden-suites-repo", default="", metavar="OWNER/NAME",
                        help="private repository the grade workflow fetches grader/suites/ from "
                        "(default: the repository variable HIDDEN_SUITES_REPO)")
    parser.add_argument("--self-study", action="store_true",
                        help="ship the hidden suites too: the workflows grade without a secret")
    parser.add_argument("--no-record", action="store_true",
                        help="do not record the assignments' contract fingerprints "
                        "(grader/instructor/released_contracts.json; tests and rehearsals)")
    parser.set_defaults(handler=_command)


def _command(args: argparse.Namespace, course: Course) -> int:
    try:
        release = build_release(args.root, args.out, course,
                                hidden_suites_repo=args.hidden_suites_repo,
                                self_study=args.self_study)
    except ReleaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    counts: dict[str, int] = {}
    for path in release.files:
        top = path.split("/")[0] if "/" in path else "(top level)"
        counts[top] = counts.get(top, 0) + 1
    print(format_table(["folder", "files"], sorted(counts.items())))
    print(f"{len(release.files)} files written to {release.out}"
          + (" (self-study: hidden suites included)" if release.self_study else ""))
    if release.leaks:
        print(f"\nerror: the release leaks {len(release.leaks)} instructor-only item(s); "
              "it must not be published:", file=sys.stderr)
        for leak in release.leaks:
            print(f"  - {leak}", file=sys.stderr)
        return 1
    print("leak check: no solution body, mutant, or hidden test name or source found")
    if not args.no_record:
        from datetime import datetime, timezone

        from grader.instructor.authoring.fingerprint import RECORD, record_release

        changed = record_release(course, args.root, datetime.now(timezone.utc).date())
        print(f"contracts recorded in {RECORD.as_posix()} (commit it): {', '.join(changed)}"
              if changed else "contracts: none changed since the last release")
    return 0

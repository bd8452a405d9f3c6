"""Step 1 of grading a pull request: take the head as data, keep only the editable files.

    python -m grader pr-apply --repo GIT_DIR --base REF --head REF --tree CLEAN --out OUT

The head is never checked out. The files it changed since the merge base (`git diff
base...head`) are read as blobs with `git cat-file`, and only those the base branch's manifest
lists as editable (`editable_paths()`: `assignments/<id>/<module>.py` for `modules` and
`extra_editable`, and the worksheet when the assignment has `worksheet_points`) are written
into CLEAN, a clean tree of the base commit (`git archive`, created when missing). Everything
else — tests, grader, workflows, conftest.py, pytest.ini, pyproject.toml, the manifest itself —
is ignored and listed with the reason in OUT/pr-files.json, which the comment shows.

Also refused, and listed: symlinks and submodules (a link could point at the hidden suites),
editable files over `MAX_FILE_BYTES`, and deletions (the base's stub is kept).
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import subprocess
import sys
import tarfile
from dataclasses import asdict, dataclass
from pathlib import Path

from grader.manifest import Course, load_manifest

MAX_FILE_BYTES = 512 * 1024
MAX_LISTED = 200  # ignored paths kept in pr-files.json; the rest are counted
FILES_JSON = "pr-files.json"
_REGULAR_MODES = ("100644", "100755")


class PrFilesError(RuntimeError):
    """git could not resolve a ref or read the repository."""


@dataclass(frozen=True)
class Change:
    """One path the pull request changed: what was done with it and why."""

    path: str
    status: str  # git's letter: A added, M modified, D deleted, T type changed
    action: str  # "applied" or "ignored"
    reason: str = ""
    assignment: str = ""


@dataclass(frozen=True)
class PrFiles:
    """Everything pr-apply decided; written as pr-files.json."""

    base: str
    head: str
    merge_base: str
    changes: tuple[Change, ...]
    more_ignored: int = 0  # ignored paths beyond MAX_LISTED, counted only

    @property
    def applied(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.action == "applied")

    @property
    def ignored(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.action == "ignored")

    @property
    def assignments(self) -> tuple[str, ...]:
        """Assignments with at least one applied file, in first-seen order."""
        return tuple(dict.fromkeys(c.assignment for c in self.applied))

    def to_json(self) -> str:
        data = asdict(self)
        data["changes"] = [asdict(c) for c in self.changes]
        return json.dumps(data, indent=2, ensure_ascii=True) + "\n"


def editable_paths(course: Course) -> dict[str, str]:
    """Repository path -> assignment id, for every file a student's pull request may change."""
    paths: dict[str, str] = {}
    for a in course.assignments:
        for module in a.modules + a.extra_editable:
            paths[f"assignments/{a.id}/{module}.py"] = a.id
        if a.worksheet_points > 0:
            paths[f"assignments/{a.id}/worksheet.ipynb"] = a.id
    return paths


def git(repo: Path, *args: str, data: bool = False) -> str | bytes:
    """Run git in `repo`; stdout as text (or bytes with `data`). `PrFilesError` on failure."""
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True,
                              timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PrFilesError(f"git {' '.join(args)}: {exc}") from exc
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise PrFilesError(f"git {' '.join(args[:3])}: {message[-1] if message else 'failed'}")
    return done.stdout if data else done.stdout.decode("utf-8", "surrogateescape")


def clean_tree(repo: Path, ref: str, tree: Path) -> None:
    """Extract the files of commit `ref` into the new folder `tree` (no .git, no hooks)."""
    archive = git(repo, "archive", "--format=tar", ref, data=True)
    tree.mkdir(parents=True, exist_ok=False)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:  # type: ignore[arg-type]
        try:
            tar.extractall(tree, filter="data")
        except TypeError:  # Python < 3.10.12 has no filters; the archive is our own base
            tar.extractall(tree)  # noqa: S202


def diff_entries(repo: Path, merge_base: str, head: str) -> list[tuple[str, str, str, str]]:
    """(status, new mode, new blob, path) of every path changed from `merge_base` to `head`."""
    raw = str(git(repo, "diff", "--raw", "-z", "--no-renames", "--no-abbrev", merge_base, head))
    fields = raw.split("\0")
    entries = []
    for i in range(0, len(fields) - 1, 2):
        meta, path = fields[i], fields[i + 1]
        if not meta.startswith(":"):
            break
        _old_mode, new_mode, _old_blob, new_blob, status = meta[1:].split(" ")
        entries.append((status[0], new_mode, new_blob, path))
    return entries


def apply_pull_request(repo: Path, base: str, head: str, tree: Path,
                       course: Course | None = None) -> PrFiles:
    """Copy the editable files `head` changed into `tree` (made from `base` when missing).

    The whitelist comes from the manifest of `base` (or `course`), never from the head.
    """
    base_sha = str(git(repo, "rev-parse", "--verify", f"{base}^{{commit}}")).strip()
    head_sha = str(git(repo, "rev-parse", "--verify", f"{head}^{{commit}}")).strip()
    merge_base = str(git(repo, "merge-base", base_sha, head_sha)).strip()
    if not tree.exists():
        clean_tree(repo, base_sha, tree)
    if course is None:
        course = load_manifest(tree / "assignments" / "course.toml")
    editable = editable_paths(course)
    changes: list[Change] = []
    for status, mode, blob, path in diff_entries(repo, merge_base, head_sha):
        changes.append(_decide(repo, tree, editable, status, mode, blob, path))
    ignored = [c for c in changes if c.action == "ignored"]
    more = max(0, len(ignored) - MAX_LISTED)
    if more:
        keep = {id(c) for c in ignored[:MAX_LISTED]}
        changes = [c for c in changes if c.action == "applied" or id(c) in keep]
    return PrFiles(base_sha, head_sha, merge_base, tuple(changes), more)


def _decide(repo: Path, tree: Path, editable: dict[str, str], status: str, mode: str,
            blob: str, path: str) -> Change:
    assignment = editable.get(path, "")
    if not assignment:
        return Change(path, status, "ignored", _why_ignored(path))
    if status == "D":
        return Change(path, status, "ignored", "deleted: the stub is graded instead",
                      assignment)
    if mode not in _REGULAR_MODES:
        return Change(path, status, "ignored", "not a regular file (symlink or submodule)",
                      assignment)
    size = int(str(git(repo, "cat-file", "-s", blob)).strip())
    if size > MAX_FILE_BYTES:
        return Change(path, status, "ignored", f"{size} bytes, over the {MAX_FILE_BYTES} "
                      "byte limit for an editable file", assignment)
    target = tree / path
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink():
        target.unlink()
    target.write_bytes(git(repo, "cat-file", "blob", blob, data=True))  # type: ignore[arg-type]
    return Change(path, status, "applied", "", assignment)


def _why_ignored(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    if path.startswith(".github/"):
        return "workflows are never taken from a pull request"
    if name in ("conftest.py", "pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini") \
            or name.endswith(".pth") or name in ("sitecustomize.py", "usercustomize.py"):
        return "configures Python or pytest: never taken from a pull request"
    if path.startswith("grader/"):
        return "part of the grader"
    if path.startswith("assignments/") and "test" in name:
        return "a test file: tests come from the course, not the pull request"
    return "not an editable file of any assignment"


def load_pr_files(path: Path) -> PrFiles:
    """Read pr-files.json back (written by pr-apply)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    changes = tuple(Change(**c) for c in data.pop("changes"))
    return PrFiles(changes=changes, **data)


# --- command line -----------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> None:
    """`python -m grader pr-apply --repo DIR --base REF --head REF --tree DIR --out DIR`."""
    parser = sub.add_parser("pr-apply", help="copy a pull request's editable files into a clean "
                            "tree of the base branch; list what was ignored")
    parser.add_argument("--repo", type=Path, default=Path("."),
                        help="git repository holding both refs (default: .)")
    parser.add_argument("--base", required=True, help="base commit or ref")
    parser.add_argument("--head", required=True, help="pull request head commit or ref")
    parser.add_argument("--tree", type=Path, required=True,
                        help="clean tree of the base: created from --base when missing")
    parser.add_argument("--out", type=Path, required=True, help=f"folder for {FILES_JSON}")
    parser.add_argument("--delete-repo", action="store_true",
                        help="delete --repo afterwards, so nothing of the head stays on disk")
    parser.set_defaults(handler=_command)


def _command(args: argparse.Namespace, course: Course) -> int:
    try:
        result = apply_pull_request(args.repo, args.base, args.head, args.tree)
    except PrFilesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / FILES_JSON).write_text(result.to_json(), encoding="utf-8")
    if args.delete_repo:
        shutil.rmtree(args.repo)
    for change in result.changes:
        note = f" ({change.reason})" if change.reason else ""
        print(f"  {change.action:8} {change.status} {change.path!r}{note}")
    print(f"{len(result.applied)} file(s) applied to {args.tree}, {len(result.ignored)} "
          f"ignored; assignments to grade: {', '.join(result.assignments) or 'none'}")
    return 0

"""`python -m grader new <id> [--title T --part P] [--modules M ...]`: scaffold an assignment.

Writes every artefact of `artefacts.ARTEFACTS` for the manifest entry of `<id>` — appending
the entry to `assignments/course.toml` first when there is none (then `--title` and `--part`
are required) — and regenerates README.md's course map. A file that exists is never
overwritten (it is listed as kept), so `new` also fills in what an assignment lacks. Every file
written carries `TODO(grader new)` markers; `python -m grader doctor <id>` lists them, with
what only a run can make (the mutation summary, the generated student worksheet).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from string import Template

from grader.instructor.authoring import templates
from grader.manifest import Assignment, Course, ManifestError, load_manifest

COURSEMAP_MARKERS = ("<!-- coursemap:start -->", "<!-- coursemap:end -->")


def append_entry(manifest: Path, assignment_id: str, title: str, part: str,
                 modules: list[str]) -> Course:
    """Append an `[[assignment]]` table to the manifest and return the course read back
    (`ManifestError` naming the field when the new entry is invalid; the file is then left
    as it was)."""
    before = manifest.read_text(encoding="utf-8")
    entry = templates.MANIFEST_ENTRY.substitute(
        id=assignment_id, title=_toml_text(title), part=_toml_text(part),
        modules=", ".join(f'"{m}"' for m in modules))
    manifest.write_text(before.rstrip("\n") + "\n" + entry, encoding="utf-8")
    try:
        return load_manifest(manifest)
    except ManifestError:
        manifest.write_text(before, encoding="utf-8")
        raise


def scaffold(assignment: Assignment, root: Path) -> tuple[list[str], list[str]]:
    """Write the assignment's files under `root`; (written, kept) as relative paths."""
    a = assignment
    values = {"id": a.id, "title": a.title, "module": a.modules[0], "points": a.points,
              "public_points": a.public_points, "hidden_points": a.hidden_points,
              "worksheet_points": a.worksheet_points}
    files: dict[str, str] = {
        f"assignments/{a.id}/__init__.py": "",
        f"assignments/{a.id}/README.md": _fill(templates.README, values),
        f"assignments/{a.id}/test_public.py": _fill(templates.PUBLIC_TEST, values),
        f"solutions/{a.id}/__init__.py": "",
        f"solutions/{a.id}/mutants/__init__.py": "",
        f"solutions/{a.id}/mutants/adds_instead_of_doubling.py": _fill(templates.MUTANT, values),
        f"solutions/{a.id}/equivalent_mutants.toml": _fill(templates.EQUIVALENTS, values),
        f"grader/suites/{a.id}/__init__.py": _fill(templates.SUITE_INIT, values),
        f"grader/suites/{a.id}/_ref.py": _fill(templates.SUITE_REF, values),
        f"grader/suites/{a.id}/_ranks.py": _fill(templates.SUITE_RANKS, values),
        f"grader/suites/{a.id}/_cases.py": _fill(templates.SUITE_CASES, values),
        f"grader/suites/{a.id}/test_{a.modules[0]}.py": _fill(templates.SUITE_TEST, values),
        f"grader/bench/{a.id}.py": _fill(templates.BENCH, values),
    }
    for module in a.modules:
        mine = dict(values, module=module)
        files[f"assignments/{a.id}/{module}.py"] = _fill(templates.STUB, mine)
        files[f"solutions/{a.id}/{module}.py"] = _fill(templates.SOLUTION, mine)
        files[f"grader/tests/independent/{a.id}/{module}.py"] = _fill(templates.INDEPENDENT,
                                                                       mine)
    for module in a.provided:
        files[f"assignments/{a.id}/{module}.py"] = (
            f'"""{a.id}: a read-only helper. {templates.T}: write it."""\n')
    if a.worksheet_points:
        files[f"solutions/{a.id}/worksheet.ipynb"] = templates.worksheet(a.id,
                                                                         a.worksheet_points)
    written, kept = [], []
    for relative, text in files.items():
        path = root / relative
        if path.exists():
            kept.append(relative)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(relative)
    return written, kept


def update_course_map(course: Course, root: Path) -> bool:
    """Paste `grader coursemap` between README.md's markers; False when it has none."""
    from grader.cli import coursemap_markdown

    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    start, end = COURSEMAP_MARKERS
    if start not in text or end not in text:
        return False
    head, tail = text[:text.index(start) + len(start)], text[text.index(end):]
    readme.write_text(f"{head}\n{coursemap_markdown(course)}{tail}", encoding="utf-8")
    return True


def _fill(template: Template, values: dict[str, object]) -> str:
    return template.substitute({k: str(v) for k, v in values.items()})


def _toml_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def run_new(args: argparse.Namespace, course: Course) -> int:
    """The `new` command; see the module docstring."""
    root: Path = args.root
    if args.id not in course.ids:
        if not (args.title and args.part):
            print(f"error: {args.id!r} is not in the manifest; give --title and --part to "
                  "append its entry", file=sys.stderr)
            return 2
        try:
            course = append_entry(root / "assignments" / "course.toml", args.id, args.title,
                                  args.part, args.modules or [args.id])
        except ManifestError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"appended [[assignment]] {args.id} to assignments/course.toml")
    written, kept = scaffold(course.get(args.id), root)
    for relative in written:
        print(f"  wrote {relative}")
    for relative in kept:
        print(f"  kept  {relative} (exists)")
    if not update_course_map(course, root):
        print("note: README.md has no coursemap markers; course map not updated")
    print(f"next: replace every {templates.T} (`python -m grader doctor {args.id}` lists "
          f"them), then `python -m grader worksheets release {args.id}`, "
          f"`python -m grader selfcheck {args.id}` and `python -m grader mutate {args.id}`")
    return 0


def register_new(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("new", help="scaffold every file of an assignment from its "
                            "manifest entry (or append the entry: --title, --part)")
    parser.add_argument("id", help="assignment id (lower_snake_case)")
    parser.add_argument("--title", help="title, when the manifest has no entry yet")
    parser.add_argument("--part", help="course part, e.g. 'II. Training parallelism'")
    parser.add_argument("--modules", nargs="+", metavar="MODULE",
                        help="the stub modules students edit (default: the id)")
    parser.set_defaults(handler=run_new)

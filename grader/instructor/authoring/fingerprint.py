"""A released contract does not change silently: fingerprints of what students code against.

An assignment's contract is what a student reads to write a correct implementation: the
stubs' public names and signatures (`api`), their docstrings (`docstrings`: the module's, each
public function's, class's and method's) and the rows of the README's grading table
(`grading`). `contract_parts` hashes each part; `python -m grader release` records them, with
the release date, in `RECORD` (committed). `grader doctor` then compares the contract now with
the record: a change is an error unless the assignment README's changelog has an entry dated on
or after the recorded release —

    ## Changelog

    - 2026-12-01: `ring_all_reduce` raises ValueError for an unknown op (was: undefined).

— which the release carries to students. A record is kept as long as the contract stays
the same, so releasing again without a change rewrites nothing.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from datetime import date
from pathlib import Path

from grader.manifest import Assignment, Course

RECORD = Path("grader") / "instructor" / "released_contracts.json"
PARTS = ("api", "docstrings", "grading")
_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")


def contract_parts(assignment: Assignment, root: Path) -> dict[str, str]:
    """sha256 of each part of the contract as it is in the tree now."""
    from grader.instructor.signatures import public_api

    api, docs = [], []
    for module in assignment.modules:
        path = root / "assignments" / assignment.id / f"{module}.py"
        source = path.read_text(encoding="utf-8") if path.is_file() else ""
        try:
            names = public_api(source, str(path))
            tree = ast.parse(source)
        except SyntaxError:
            names, tree = {"<syntax error>": source}, ast.Module(body=[], type_ignores=[])
        api += [f"{module}:{name}={text}" for name, text in sorted(names.items())]
        docs += [f"{module}:{name}={text}" for name, text in docstrings(tree)]
    readme = root / "assignments" / assignment.id / "README.md"
    grading = grading_table(readme.read_text(encoding="utf-8") if readme.is_file() else "")
    return {"api": _hash(api), "docstrings": _hash(docs), "grading": _hash(grading)}


def docstrings(tree: ast.Module) -> list[tuple[str, str]]:
    """(dotted name, docstring) of the module and its public functions, classes, methods."""
    found = [("<module>", ast.get_docstring(tree) or "")]

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (
                    not node.name.startswith("_") or node.name.startswith("__")):
                found.append((prefix + node.name, ast.get_docstring(node) or ""))
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{prefix}{node.name}.")

    visit(tree.body, "")
    return found


def grading_table(readme: str) -> list[str]:
    """The table rows (`|` lines) of the README's section whose heading says "Grading"."""
    rows, inside, level = [], False, 0
    for line in readme.splitlines():
        heading = _HEADING.match(line)
        if heading:
            if inside and len(heading.group(1)) <= level:
                break
            if not inside and "grading" in heading.group(2).lower():
                inside, level = True, len(heading.group(1))
            continue
        if inside and line.lstrip().startswith("|"):
            rows.append(" ".join(line.split()))
    return rows


def changelog_dates(readme: str) -> list[date]:
    """The dates of the entries under the README's "Changelog" heading."""
    found, inside, level = [], False, 0
    for line in readme.splitlines():
        heading = _HEADING.match(line)
        if heading:
            if inside and len(heading.group(1)) <= level:
                break
            if not inside and "changelog" in heading.group(2).lower():
                inside, level = True, len(heading.group(1))
            continue
        match = _DATE.search(line) if inside and line.lstrip().startswith(("-", "*")) else None
        if match:
            try:
                found.append(date(*(int(g) for g in match.groups())))
            except ValueError:
                continue
    return found


def load_record(root: Path) -> dict[str, dict]:
    path = root / RECORD
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def record_release(course: Course, root: Path, today: date) -> list[str]:
    """Record the contract of every assignment whose contract is new or changed (dated
    `today`); the others keep their record. Returns the ids recorded."""
    record = load_record(root)
    changed = []
    for assignment in course.assignments:
        parts = contract_parts(assignment, root)
        if record.get(assignment.id, {}).get("parts") != parts:
            record[assignment.id] = {"released": today.isoformat(), "parts": parts}
            changed.append(assignment.id)
    if changed:
        path = root / RECORD
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return changed


def contract_findings(assignment: Assignment, root: Path) -> list[tuple[str, str]]:
    """(level, message) for doctor: an error for a changed contract without a changelog entry
    dated on or after its release, a warning for an assignment never released."""
    entry = load_record(root).get(assignment.id)
    if entry is None:
        return [("warn", "never released: no contract recorded in "
                         f"{RECORD.as_posix()} (`python -m grader release` records it)")]
    now = contract_parts(assignment, root)
    changed = [part for part in PARTS if entry["parts"].get(part) != now[part]]
    if not changed:
        return []
    released = date.fromisoformat(entry["released"])
    readme = root / "assignments" / assignment.id / "README.md"
    dates = changelog_dates(readme.read_text(encoding="utf-8") if readme.is_file() else "")
    what = ", ".join({"api": "stub names/signatures", "docstrings": "stub docstrings",
                      "grading": "README grading table"}[p] for p in changed)
    if any(d >= released for d in dates):
        return [("warn", f"contract changed since the release of {released} ({what}); the "
                         "README's changelog says so, `grader release` records it")]
    return [("error", f"contract changed since the release of {released} ({what}) with no "
                      "changelog entry: add `- YYYY-MM-DD: what changed` under a `## Changelog` "
                      "heading of the README (students who submitted see it)")]


def _hash(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]

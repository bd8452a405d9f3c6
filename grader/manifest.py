"""The course manifest, `assignments/course.toml`, read into frozen dataclasses.

`load_manifest()` parses and validates the file; every error is a `ManifestError` whose message
names the file and the field (`assignment[2] (zero2).public_points: expected an integer, got
'20'`), so a typo in the manifest points at itself. The order of the `[[assignment]]` tables is
the course order, and a prerequisite must come earlier in that order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the backport has the same API.
    import tomli as tomllib  # type: ignore[no-redef]

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PATH = REPO_ROOT / "assignments" / "course.toml"

_ID = re.compile(r"^[a-z][a-z0-9_]*$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ManifestError(ValueError):
    """The manifest is missing, not TOML, or a field has the wrong type or value."""


@dataclass(frozen=True)
class Assignment:
    """One `[[assignment]]` table: what a student builds and how many points it is worth."""

    id: str
    title: str
    part: str
    points: int
    public_points: int
    prerequisites: tuple[str, ...]
    topics: tuple[str, ...]
    modules: tuple[str, ...]
    provided: tuple[str, ...] = ()
    extra_editable: tuple[str, ...] = ()
    worksheet_points: int = 0  # the nbgrader worksheet (grader/worksheets/), graded apart
    # Names or rules of the static screen this assignment allows (grader/screen/scan.py).
    screen_allow: tuple[str, ...] = ()

    @property
    def hidden_points(self) -> int:
        return self.points - self.public_points


@dataclass(frozen=True)
class Course:
    """The whole manifest; `assignments` in course order."""

    name: str
    version: str
    assignments: tuple[Assignment, ...]
    source: str = ""

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(a.id for a in self.assignments)

    def get(self, assignment_id: str) -> Assignment:
        """The assignment with this id; `KeyError` naming the known ids otherwise."""
        for assignment in self.assignments:
            if assignment.id == assignment_id:
                return assignment
        known = ", ".join(self.ids)
        raise KeyError(f"unknown assignment {assignment_id!r}; the manifest has: {known}")

    def select(self, ids: list[str] | tuple[str, ...]) -> tuple[Assignment, ...]:
        """The named assignments in course order (all of them when `ids` is empty)."""
        if not ids:
            return self.assignments
        for assignment_id in ids:
            self.get(assignment_id)
        return tuple(a for a in self.assignments if a.id in set(ids))


_ASSIGNMENT_FIELDS: dict[str, tuple[type, bool]] = {
    # field: (type, required)
    "id": (str, True),
    "title": (str, True),
    "part": (str, True),
    "points": (int, True),
    "public_points": (int, True),
    "prerequisites": (list, True),
    "topics": (list, True),
    "modules": (list, True),
    "provided": (list, False),
    "extra_editable": (list, False),
    "worksheet_points": (int, False),
    "screen_allow": (list, False),
}


def load_manifest(path: Path | str | None = None) -> Course:
    """Read and validate the manifest at `path` (default `assignments/course.toml`).

    Raises `ManifestError` naming the file and the offending field.
    """
    path = Path(path) if path is not None else DEFAULT_PATH
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read the course manifest ({exc.strerror})") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path}: not valid TOML: {exc}") from exc
    return parse_manifest(data, source=str(path))


def parse_manifest(data: dict[str, Any], source: str = "course.toml") -> Course:
    """Validate already-parsed TOML data and build the `Course`."""
    unknown = set(data) - {"course", "assignment"}
    if unknown:
        raise ManifestError(f"{source}: unknown top-level table(s): {', '.join(sorted(unknown))}")
    course = data.get("course")
    if not isinstance(course, dict):
        raise ManifestError(f"{source}: [course] table is missing")
    name = _typed(course, "name", str, f"{source}: course")
    version = _typed(course, "version", str, f"{source}: course")
    tables = data.get("assignment")
    if not isinstance(tables, list) or not tables:
        raise ManifestError(f"{source}: no [[assignment]] tables")
    assignments: list[Assignment] = []
    for index, table in enumerate(tables):
        assignments.append(_parse_assignment(table, index, source, assignments))
    return Course(name=name, version=version, assignments=tuple(assignments), source=source)


def _parse_assignment(
    table: dict[str, Any], index: int, source: str, earlier: list[Assignment]
) -> Assignment:
    where = f"{source}: assignment[{index}]"
    if isinstance(table.get("id"), str):
        where += f" ({table['id']})"
    unknown = set(table) - set(_ASSIGNMENT_FIELDS)
    if unknown:
        raise ManifestError(f"{where}: unknown field(s): {', '.join(sorted(unknown))}")
    values = _read_fields(table, where)
    _check_id_and_points(values, where, earlier)
    _check_modules(values, where)
    _check_prerequisites(values, where, earlier)
    return Assignment(**values)


def _read_fields(table: dict[str, Any], where: str) -> dict[str, Any]:
    """Every field of `_ASSIGNMENT_FIELDS` from the table, typed; defaults for absent optional
    ones."""
    values: dict[str, Any] = {}
    for field, (kind, required) in _ASSIGNMENT_FIELDS.items():
        if field not in table and not required:
            values[field] = 0 if kind is int else ()
            continue
        value = _typed(table, field, kind, where)
        values[field] = tuple(_strings(value, field, where)) if kind is list else value
    return values


def _check_id_and_points(values: dict[str, Any], where: str, earlier: list[Assignment]) -> None:
    if not _ID.match(values["id"]):
        raise ManifestError(f"{where}.id: {values['id']!r} is not a lower_snake_case name")
    if values["id"] in {a.id for a in earlier}:
        raise ManifestError(f"{where}.id: {values['id']!r} appears twice")
    if values["points"] <= 0:
        raise ManifestError(f"{where}.points: must be positive, got {values['points']}")
    if not 0 <= values["public_points"] <= values["points"]:
        raise ManifestError(
            f"{where}.public_points: must lie in [0, points={values['points']}], "
            f"got {values['public_points']}"
        )
    if values["worksheet_points"] < 0:
        raise ManifestError(f"{where}.worksheet_points: must be >= 0, "
                            f"got {values['worksheet_points']}")


def _check_modules(values: dict[str, Any], where: str) -> None:
    if not values["modules"]:
        raise ManifestError(f"{where}.modules: lists no module; students must edit at least one")
    for field in ("modules", "provided", "extra_editable"):
        for module in values[field]:
            if not _MODULE.match(module):
                raise ManifestError(f"{where}.{field}: {module!r} is not a Python module name")
    from grader.screen.rules import known_names  # stdlib only

    unknown_names = sorted(set(values["screen_allow"]) - known_names())
    if unknown_names:
        raise ManifestError(f"{where}.screen_allow: {unknown_names} are neither a rule of the "
                            "static screen nor a name it screens (grader/screen/scan.py)")
    clash = set(values["modules"]) & set(values["provided"])
    if clash:
        raise ManifestError(f"{where}.provided: {sorted(clash)} also listed in modules")


def _check_prerequisites(values: dict[str, Any], where: str, earlier: list[Assignment]) -> None:
    known = {a.id for a in earlier}
    for prerequisite in values["prerequisites"]:
        if prerequisite not in known:
            raise ManifestError(
                f"{where}.prerequisites: {prerequisite!r} is not an earlier assignment "
                "(prerequisites must come first in the manifest)"
            )


def _typed(table: dict[str, Any], field: str, kind: type, where: str) -> Any:
    if field not in table:
        raise ManifestError(f"{where}.{field}: missing")
    value = table[field]
    # bool is an int subclass; `points = true` is a typo, not a score.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        expected = {str: "a string", int: "an integer", list: "a list"}[kind]
        raise ManifestError(f"{where}.{field}: expected {expected}, got {value!r}")
    return value


def _strings(values: list[Any], field: str, where: str) -> list[str]:
    for item in values:
        if not isinstance(item, str) or not item:
            raise ManifestError(f"{where}.{field}: items must be non-empty strings, got {item!r}")
    if len(set(values)) != len(values):
        raise ManifestError(f"{where}.{field}: has duplicates")
    return values

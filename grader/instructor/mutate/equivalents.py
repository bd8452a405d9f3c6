"""The reviewed list of equivalent mutants: `solutions/<id>/equivalent_mutants.toml`.

A generated mutant that no test of the documented contract can tell from the solution (it
doubles an epsilon, drops a `.contiguous()` copy that is never written, flips a bound that the
contract makes unreachable) is *equivalent*: it leaves the denominator of the score. Each one is
listed, after review, with the reason in one line:

```toml
[[equivalent]]
id = "3f9a21c0"                    # the mutant's stable id (the last part of its name)
mutant = "ring.py:88:cmp_flip"     # where it was when reviewed; for the reader, not matched
reason = "numel is never negative here: _chunk_bounds rejected it above"
```

Entries are matched by `id`, which does not depend on line numbers. An entry whose id no longer
matches a generated mutant is stale and is reported, so the list cannot outlive its code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the backport has the same API.
    import tomli as tomllib  # type: ignore[no-redef]

FILE_NAME = "equivalent_mutants.toml"
_ID = re.compile(r"^[0-9a-f]{8}$")
_FIELDS = {"id", "mutant", "reason"}


class EquivalentsError(ValueError):
    """The equivalent-mutant list is not valid TOML or an entry is malformed."""


@dataclass(frozen=True)
class Equivalent:
    """One reviewed entry: this mutant behaves like the solution, for this reason."""

    mutant_id: str
    reason: str
    mutant: str = ""

    def __post_init__(self) -> None:
        if not _ID.match(self.mutant_id):
            raise EquivalentsError(f"id {self.mutant_id!r} is not 8 lowercase hex digits "
                                   "(copy it from `python -m grader mutate <id> --list`)")
        if not self.reason.strip() or "\n" in self.reason:
            raise EquivalentsError(f"entry {self.mutant_id}: `reason` must be one non-empty "
                                   "line saying why no test of the contract can catch it")


def equivalents_path(assignment_id: str, root: Path) -> Path:
    return root / "solutions" / assignment_id / FILE_NAME


def load_equivalents(assignment_id: str, root: Path) -> dict[str, Equivalent]:
    """id -> entry; empty when the file does not exist. Raises EquivalentsError naming the file."""
    path = equivalents_path(assignment_id, root)
    if not path.is_file():
        return {}
    return parse_equivalents(path.read_text(encoding="utf-8"), str(path))


def parse_equivalents(text: str, source: str = FILE_NAME) -> dict[str, Equivalent]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise EquivalentsError(f"{source}: not valid TOML: {exc}") from exc
    unknown = set(data) - {"equivalent"}
    if unknown:
        raise EquivalentsError(f"{source}: unknown top-level key(s) {sorted(unknown)}; "
                               "entries are [[equivalent]] tables")
    entries = data.get("equivalent", [])
    if not isinstance(entries, list):
        raise EquivalentsError(f"{source}: `equivalent` must be an array of tables "
                               "([[equivalent]])")
    found: dict[str, Equivalent] = {}
    for index, table in enumerate(entries):
        where = f"{source}: equivalent[{index}]"
        if not isinstance(table, dict):
            raise EquivalentsError(f"{where}: expected a table")
        extra = set(table) - _FIELDS
        if extra:
            raise EquivalentsError(f"{where}: unknown field(s) {sorted(extra)}; "
                                   f"known: {sorted(_FIELDS)}")
        values = {}
        for key in ("id", "reason", "mutant"):
            value = table.get(key, "")
            if not isinstance(value, str) or (key != "mutant" and not value):
                raise EquivalentsError(f"{where}.{key}: expected a non-empty string, "
                                       f"got {value!r}")
            values[key] = value
        try:
            entry = Equivalent(values["id"], values["reason"], values["mutant"])
        except EquivalentsError as exc:
            raise EquivalentsError(f"{where}: {exc}") from exc
        if entry.mutant_id in found:
            raise EquivalentsError(f"{where}: id {entry.mutant_id} is listed twice")
        found[entry.mutant_id] = entry
    return found

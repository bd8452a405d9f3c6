"""Which test caught each hand-written mutant last time, so that selfcheck runs it first.

A mutant stops at its first failing test, and its cost is everything it ran before that test:
in suite order, a mutant caught by a hidden test at the end of a long suite reran most of the
suite first (ring_allreduce's `no_write_back`: 30 tests, of which the last caught it). The
record `solutions/<id>/mutants/caught_by.json` maps each mutant's name to the base node id of
the test that caught it; selfcheck moves that test to the front of the mutant's tests
(grader/instructor/plugin_coverage.py, the plan's `"first"`) and rewrites the record after
every run, so an edited suite or mutant costs one run in suite order, never a verdict.

Nothing is trusted from the record: the mutant is still graded, it must still fail a test, and
a hinted test that now passes is followed by the rest of the suite in order. While the record is
current, the test named is the one suite order names (it caught the mutant first there, and
with stop-at-first-failure nothing else runs); when it is stale, the test named still caught
the mutant, and the next run's record says so.
"""

from __future__ import annotations

import json
from pathlib import Path

RECORD = "caught_by.json"


def record_path(root: Path, assignment_id: str) -> Path:
    return root / "solutions" / assignment_id / "mutants" / RECORD


def load(root: Path, assignment_id: str) -> dict[str, str]:
    """mutant name -> base node id of the test that caught it; {} when absent or unreadable
    (then every mutant runs in suite order)."""
    try:
        data = json.loads(record_path(root, assignment_id).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, str) and v}


def save(root: Path, assignment_id: str, caught: dict[str, str], names: list[str]) -> bool:
    """Write the record of this run: `caught` (mutant -> test) for the mutants in `names` (those
    that exist; a mutant not caught this run loses its entry). Returns whether it changed."""
    path = record_path(root, assignment_id)
    new = {name: caught[name] for name in sorted(names) if caught.get(name)}
    if new == load(root, assignment_id) or not path.parent.is_dir():
        return False
    path.write_text(json.dumps(new, indent=1) + "\n", encoding="utf-8")
    return True

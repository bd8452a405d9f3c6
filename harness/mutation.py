"""Mutants as small patches of a solution, so they never drift from it silently.

A mutant file calls `mutate(globals(), "<id>", "<module>", replace=[(old, new), ...])`: the
solution's source, with each `old` replaced by `new` (each must occur exactly once), is executed
in the mutant's own namespace. Definitions after the call override the solution's, and the
solution's other functions see them because they share that namespace.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


class StaleMutant(RuntimeError):
    """A replacement no longer matches the solution's source exactly once."""


def mutate(namespace: dict[str, Any], assignment_id: str, module_name: str,
           replace: Sequence[tuple[str, str]] = ()) -> None:
    """Execute solutions/<assignment_id>/<module_name>.py, patched, into `namespace`.

    The solution is found beside the mutant: <root>/solutions/<id>/mutants/<name>.py mutates
    <root>/solutions/<id>/<module_name>.py.
    """
    mutant_file = Path(namespace["__file__"]).resolve()
    if mutant_file.parent.parent.name != assignment_id:
        raise StaleMutant(f"{mutant_file} lives under {mutant_file.parent.parent.name}, "
                          f"not {assignment_id}")
    path = mutant_file.parent.parent / f"{module_name}.py"
    source = path.read_text()
    for old, new in replace:
        count = source.count(old)
        if count != 1:
            raise StaleMutant(f"{namespace.get('__file__', 'mutant')}: {old!r} occurs {count} "
                              f"times in {path}; a mutant's replacement must match exactly once")
        source = source.replace(old, new)
    code = compile(source, str(path), "exec")
    exec(code, namespace)  # noqa: S102 - instructor-owned source, run only inside a rank

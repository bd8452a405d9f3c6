"""Which modules of a package one module imports, read from its source: the shared reader of the
layout tests that keep a package free of import cycles.

Every `import` counts, those inside function bodies too: a lazy import hides a cycle from the
interpreter, not from a reader.
"""

from __future__ import annotations

import ast
from pathlib import Path


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that module `name` (whose source is `path`) imports anywhere in
    its file, itself left out.

    `from a import b` counts as importing `a.b` when that is in `known` (a submodule), else as
    importing `a` (a name of the package or module `a`). Relative imports are resolved against
    `name`'s package (`name` itself when `path` is an `__init__.py`).
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in known else base)
    return {m for m in found if m in known and m != name}

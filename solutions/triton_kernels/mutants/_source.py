"""Make Triton see a mutant's kernels: register the patched source where `inspect` looks.

`triton.jit` (compiled and interpreted alike) does not run a kernel's code object: it reads the
kernel's source again with `inspect.getsourcelines`, i.e. from `linecache`, keyed by the file
name the code was compiled with. `harness.mutation.mutate` compiles the patched solution under
the solution's own path, so without this Triton would read the unpatched kernels from disk and
every kernel mutant would silently be the solution. Registering the patched text under that
path (with no mtime, so `linecache.checkcache` keeps it) fixes that; it only ever happens in
the rank process that loads the mutant.
"""

from __future__ import annotations

import linecache
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.mutation import mutate


def mutate_kernels(namespace: dict[str, Any], replace: Sequence[tuple[str, str]]) -> None:
    """`mutate(namespace, "triton_kernels", "kernels", replace)`, visible to triton.jit."""
    path = Path(namespace["__file__"]).resolve().parent.parent / "kernels.py"
    source = path.read_text()
    for old, new in replace:  # mutate() checks that each occurs exactly once
        source = source.replace(old, new, 1)
    lines = source.splitlines(keepends=True)
    linecache.cache[str(path)] = (len(source), None, lines, str(path))
    mutate(namespace, "triton_kernels", "kernels", replace=replace)

"""`python -m grader bench <name> [args]`: run `grader.bench.<name>.main(argv)`.

Each benchmark is a module here with `def main(argv: list[str]) -> int` and a docstring whose
first line says what it measures. Benchmarks print ratios measured side by side in one run;
they never assert on time. Those that serve instructors only (`selfcheck`, `class_view`,
`student`) live in `grader/instructor/bench/` and are listed where that folder is (not in a
student release).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
INSTRUCTOR_BENCH_DIR = BENCH_DIR.parent / "instructor" / "bench"
# folder -> the package its modules are imported from
_PACKAGES = {BENCH_DIR: "grader.bench", INSTRUCTOR_BENCH_DIR: "grader.instructor.bench"}


def _module_paths() -> dict[str, Path]:
    """Benchmark name -> its file, the course's and (where present) the instructors'."""
    return {path.stem: path for folder in _PACKAGES for path in sorted(folder.glob("*.py"))
            if not path.stem.startswith("_")}


def available() -> dict[str, str]:
    """Benchmark name -> first docstring line, read without importing (imports are slow)."""
    benches = {}
    for path in _module_paths().values():
        try:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        except SyntaxError:
            doc = "(does not parse)"
        benches[path.stem] = doc.strip().splitlines()[0] if doc.strip() else ""
    return benches


def main(argv: list[str]) -> int:
    """Dispatch to a benchmark; with no name (or -h), list the available ones."""
    benches = available()
    if not argv or argv[0] in ("-h", "--help", "list"):
        print("usage: python -m grader bench <name> [args]\n\navailable benchmarks:")
        width = max((len(n) for n in benches), default=0)
        for name, doc in benches.items():
            print(f"  {name:<{width}}  {doc}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in benches:
        print(f"error: no benchmark {name!r}; available: {', '.join(benches) or 'none'}",
              file=sys.stderr)
        return 2
    path = _module_paths()[name]
    module = importlib.import_module(f"{_PACKAGES[path.parent]}.{name}")
    return int(module.main(rest) or 0)


def add_impl_option(parser: argparse.ArgumentParser, default: str = "solutions") -> None:
    """`--impl`, resolved once while parsing: `args.impl` is a `harness.impl.ImplSpec`."""
    from harness.impl import IMPL_HELP, resolve_impl

    def resolved(text: str):
        try:
            return resolve_impl(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parser.add_argument("--impl", default=default, type=resolved, help=IMPL_HELP)

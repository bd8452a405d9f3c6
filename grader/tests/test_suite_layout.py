"""The standard layout of a hidden suite (docs/authoring.md), checked for every suite that has
moved to it (one with `_ref.py`, `_ranks.py` and `_cases.py`; the others are left to their move).

- modules: `__init__.py`, `test_*.py`, and helpers named `_ref`, `_ranks` or `_cases`, each
  optionally split by topic (`_ref_rules.py`, `_ranks_decoder.py`) when one would pass the size;
- no module above MAX_LINES lines;
- what travels to the ranks (`_ranks*`) imports no reference, case table or test module of its
  suite, so no expected value can reach a rank through an import;
- no test module imports another one (what two test modules share lives in a helper).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader.manifest import load_manifest
from harness.importgraph import imported_modules

ROOT = Path(__file__).resolve().parents[2]
SUITES = ROOT / "grader" / "suites"
MAX_LINES = 360  # "about 350" (docs/authoring.md)
LAYOUT = ("_ref", "_ranks", "_cases")
HELPER = re.compile(r"_(ref|ranks|cases)(_[a-z0-9]+)*")


def standard_suites() -> list[str]:
    return [a.id for a in load_manifest().assignments
            if all((SUITES / a.id / f"{helper}.py").is_file() for helper in LAYOUT)]


def suite_modules(suite: str) -> dict[str, Path]:
    return {f"grader.suites.{suite}.{p.stem}": p for p in sorted((SUITES / suite).glob("*.py"))
            if p.stem != "__init__"}


def test_every_suite_is_in_the_standard_layout():
    missing = {a.id: [h for h in LAYOUT if not (SUITES / a.id / f"{h}.py").is_file()]
               for a in load_manifest().assignments if (SUITES / a.id).is_dir()}
    missing = {suite: helpers for suite, helpers in missing.items() if helpers}
    assert not missing, ("every hidden suite has _ref.py, _ranks.py and _cases.py "
                         f"(docs/authoring.md, \"The suite layout\"); lacking: {missing}")


@pytest.mark.parametrize("suite", standard_suites())
def test_suite_modules_are_named_and_sized_by_the_layout(suite):
    for path in suite_modules(suite).values():
        stem = path.stem
        assert stem.startswith("test_") or HELPER.fullmatch(stem), (
            f"grader/suites/{suite}/{path.name}: not a name of the suite layout; put references "
            f"in _ref*.py, rank code in _ranks*.py, case tables and launches in _cases*.py")
        lines = len(path.read_text(encoding="utf-8").splitlines())
        assert lines <= MAX_LINES, (
            f"grader/suites/{suite}/{path.name} has {lines} lines (at most {MAX_LINES}): split "
            f"it by topic, e.g. {stem}_<topic>.py")


@pytest.mark.parametrize("suite", standard_suites())
def test_rank_code_and_tests_import_only_what_they_may(suite):
    modules = suite_modules(suite)
    for name, path in modules.items():
        stem = path.stem
        imported = {m.rpartition(".")[2] for m in imported_modules(name, path, set(modules))}
        if stem.startswith("_ranks"):
            banned = sorted(m for m in imported if not m.startswith("_ranks"))
            assert not banned, (f"grader/suites/{suite}/{path.name} imports {banned}: rank code "
                                f"travels to the ranks, so it may import only _ranks* modules")
        if stem.startswith("test_"):
            tests = sorted(m for m in imported if m.startswith("test_"))
            assert not tests, (f"grader/suites/{suite}/{path.name} imports the test module(s) "
                               f"{tests}: move what they share into _ref, _ranks or _cases")

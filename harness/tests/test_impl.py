"""--impl selection: which file a rank imports, mutants as patches, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import NotImplementedInRank, RankFailure, launch
from harness.impl import resolve_impl
from harness.tests import rankfns

TREE = Path(__file__).parent / "fixtures" / "impl" / "tree"


def run(impl: str) -> dict:
    spec = resolve_impl(impl, repo_root=TREE)
    return launch(rankfns.use_impl, args=("demo", "calc"), impl=spec).values[0]


def test_solutions_and_assignments():
    assert run("solutions")["value"] == 31
    with pytest.raises(NotImplementedInRank, match="compute: see README §1"):
        run("assignments")


def test_a_mutant_is_the_solution_patched():
    assert run("mutant:demo/off_by_one")["value"] == 32
    assert run("mutant:demo/override")["value"] == 35


def test_a_stale_mutant_fails_loudly():
    with pytest.raises(RankFailure, match="raised StaleMutant: .*stale.py: 'return 3' occurs 0"):
        run("mutant:demo/stale")


def test_a_submission_directory_with_relative_imports():
    value = run(str(TREE / "submission"))
    assert value["value"] == 103 and value["file"].endswith("submission/demo/calc.py")


def test_a_missing_module_in_a_submission_names_the_file(tmp_path):
    (tmp_path / "demo").mkdir()
    with pytest.raises(RankFailure, match="has no demo/calc.py"):
        run(str(tmp_path))


@pytest.mark.parametrize("impl, message", [
    ("mutant:demo/nope", "known for demo: off_by_one, override, stale"),
    ("mutant:demo", "use mutant:<id>/<name>"),
    ("/no/such/dir", "not 'assignments', 'solutions'"),
])
def test_bad_impl_values_are_refused_in_the_parent(impl, message):
    with pytest.raises(ValueError, match=message):
        resolve_impl(impl, repo_root=TREE)

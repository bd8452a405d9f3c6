"""`python -m grader`: list, coursemap, grade end to end, argument errors, bench dispatch."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import types
from pathlib import Path

import jsonschema

import grader.bench as bench
import grader.cli as cli
from grader.bench.harness import ratio_rows, verdicts
from grader.manifest import REPO_ROOT, load_manifest
from grader.tests._fakes import make_course

SCHEMA = json.loads((REPO_ROOT / "grader" / "schemas" / "results.schema.json").read_text())


def grade(root: Path, out: Path, *extra: str) -> int:
    argv = ["--root", str(root), "grade", "--suites", str(root / "suites"), "--out", str(out)]
    return cli.main(argv + ["-n", "0", *extra])


def test_module_entry_point_lists_the_course():
    done = subprocess.run([sys.executable, "-m", "grader", "list"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for assignment_id in load_manifest().ids:
        assert assignment_id in done.stdout


def test_coursemap_has_one_row_per_assignment_in_order(capsys):
    assert cli.main(["coursemap"]) == 0
    lines = capsys.readouterr().out.splitlines()
    course = load_manifest()
    assert lines[0].startswith("| # | assignment |") and len(lines) == 2 + len(course.ids)
    for number, (line, assignment) in enumerate(zip(lines[2:], course.assignments), start=1):
        assert line.startswith(f"| {number} | [`{assignment.id}`](assignments/{assignment.id}/")
        assert f"| {assignment.points} |" in line
    assert cli.coursemap_markdown(course) == "\n".join(lines) + "\n"


def test_bad_ids_impls_and_missing_tests_are_refused(tmp_path, capsys):
    root = make_course(tmp_path / "course")
    assert grade(root, tmp_path / "out", "nope") == 2
    assert "unknown assignment 'nope'" in capsys.readouterr().err
    assert grade(root, tmp_path / "out", "--impl", "no/such/dir") == 2
    assert "not 'assignments', 'solutions'" in capsys.readouterr().err
    assert grade(root, tmp_path / "out", "--impl", "mutant:toy") == 2
    empty = make_course(tmp_path / "empty")
    assert cli.main(["--root", str(empty), "grade", "--out", str(tmp_path / "o")]) == 1
    assert "no tests to run" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_grade_the_stub_end_to_end_scores_zero_and_exits_zero(tmp_path, capsys):
    root = make_course(tmp_path / "course")
    # A conftest.py planted beside a suite must never run under the grader (--noconftest).
    (root / "suites" / "toy" / "conftest.py").write_text("raise SystemExit('conftest ran')\n")
    out = tmp_path / "out"
    assert grade(root, out) == 0
    printed = capsys.readouterr().out
    assert "toy: 0/4" in printed and "not implemented yet" in printed
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    jsonschema.validate(results, SCHEMA, cls=jsonschema.Draft202012Validator)
    assert results["score"] == 0 and results["extra_data"]["max_score"] == 4
    graded = [t for t in results["tests"] if t["max_score"]]
    assert len(graded) == 3 and all(t["output"].startswith("not implemented yet") for t in graded)
    summary = (out / "summary.md").read_text(encoding="utf-8")
    assert "## mlsys-labs grade: 0 / 4" in summary and "excluded from the maximum" in summary
    assert (out / "junit.xml").read_text(encoding="utf-8").startswith("<?xml")


def test_grade_the_solution_with_xdist_scores_full_marks(tmp_path, capsys):
    root = make_course(tmp_path / "course")
    out = tmp_path / "out"
    assert grade(root, out, "--impl", "solutions", "-n", "2") == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["score"] == 4 and results["extra_data"]["impl"] == "solutions"
    assert "toy: 4/4" in capsys.readouterr().out


def test_grade_a_submission_directory(tmp_path):
    root = make_course(tmp_path / "course")
    submission = tmp_path / "submission" / "toy"
    submission.mkdir(parents=True)
    (submission / "toy.py").write_text("def add(a, b=0):\n    return a - b\n")
    out = tmp_path / "out"
    assert grade(root, out, "--impl", str(submission.parent)) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["score"] == 2  # test_zero passes for a - 0, test_add does not


def test_a_broken_suite_file_fails_the_run_but_the_rest_is_graded(tmp_path, capsys):
    root = make_course(tmp_path / "course")
    broken = root / "suites" / "toy" / "test_broken.py"
    broken.write_text("HIDDEN_INPUT = 1234567\nimport no_such_module_here\n", encoding="utf-8")
    out = tmp_path / "out"
    assert grade(root, out, "--impl", "solutions") == 1
    captured = capsys.readouterr()
    assert "could not be collected" in captured.err
    summary = (out / "summary.md").read_text(encoding="utf-8")
    assert "could not collect" in summary and "No module named" in summary
    assert "1234567" not in summary + captured.out  # no suite source in what students see
    assert json.loads((out / "results.json").read_text(encoding="utf-8"))["score"] == 4


def test_bench_lists_dispatches_and_refuses_unknown_names(monkeypatch, capsys):
    assert cli.main(["bench"]) == 0
    assert "harness" in capsys.readouterr().out
    assert cli.main(["bench", "--help"]) == 0
    assert "available benchmarks" in capsys.readouterr().out
    assert cli.main(["bench", "nope"]) == 2
    assert "no benchmark 'nope'" in capsys.readouterr().err
    seen = []
    fake = types.ModuleType("grader.bench.fake")
    fake.main = lambda argv: seen.append(argv) or 3
    monkeypatch.setitem(sys.modules, "grader.bench.fake", fake)
    monkeypatch.setattr(bench, "available", lambda: {"fake": "a fake"})
    monkeypatch.setattr(bench, "_module_paths", lambda: {"fake": bench.BENCH_DIR / "fake.py"})
    assert cli.main(["bench", "fake", "--runs", "2"]) == 3
    assert seen == [["--runs", "2"]]


def test_harness_bench_ratios_and_targets():
    medians = {2: (0.05, 3.0), 4: (0.1, 4.0), 8: (0.3, 6.0)}
    assert ratio_rows(medians)[1] == ["4", "0.100", "4.000", "40.0x"]
    met = verdicts(medians)
    assert "40.0x (met)" in met[0] and "0.100 s (met)" in met[1]
    slow = verdicts({4: (0.5, 5.0)})
    assert "10.0x (NOT met)" in slow[0] and "0.500 s (NOT met)" in slow[1]
    assert "did not measure" in verdicts({2: (0.1, 1.0)})[0]


def test_every_benchmark_has_a_docstring_and_main_argv():
    """Read by AST: importing a benchmark pulls in torch and, for some, triton."""
    assert "harness" in bench.available()
    for name, doc in bench.available().items():
        tree = ast.parse(bench._module_paths()[name].read_text(encoding="utf-8"))
        mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
        assert doc, f"grader/bench/{name}.py needs a docstring: its first line is listed"
        assert mains and [a.arg for a in mains[0].args.args] == ["argv"], (
            f"grader/bench/{name}.py needs `def main(argv: list[str]) -> int`")

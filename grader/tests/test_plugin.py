"""The pytest plugin: points are mandatory, reasons are short, results survive xdist."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader.session.plugin import REPO_ROOT

SUITE = '''
import pytest, torch

def rank_stub(ctx):
    raise NotImplementedError("ring_all_reduce: see README §3")

def rank_value(ctx):
    return ctx.rank

@pytest.mark.points(2)
def test_passes(launch):
    assert launch(rank_value, world_size=2).values == [0, 1]

@pytest.mark.points(3)
def test_fails_with_message():
    assert 1 == 2, "[rank 0 of 1] chunk 1 differs by 3e-2; did you average twice?"

@pytest.mark.points(5)
def test_stub(launch):
    launch(rank_stub)

@pytest.fixture(scope="module")
def shared(launch):
    return launch(rank_stub)

@pytest.mark.points(1)
def test_uses_failing_fixture(shared):
    pass

@pytest.mark.gpu
@pytest.mark.points(4)
def test_needs_gpu():
    pass
'''


def run_pytest(tmp_path: Path, body: str, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    suite = tmp_path / "hidden" / "demo"
    suite.mkdir(parents=True)
    (suite / "test_demo.py").write_text(textwrap.dedent(body))
    out = tmp_path / "results.json"
    cmd = [sys.executable, "-m", "pytest", "-p", "grader.session.plugin", "--noconftest", "-q",
           "--hidden-root", str(tmp_path / "hidden"), "--mlsys-results", str(out),
           "-p", "no:cacheprovider", str(suite), *extra]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    data = json.loads(out.read_text()) if out.exists() else {}
    return proc, data


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_results_carry_points_outcomes_and_short_reasons(tmp_path, workers):
    events_path = tmp_path / "events.jsonl"
    proc, data = run_pytest(tmp_path, SUITE, *workers, "--mlsys-progress",
                            "--mlsys-events", str(events_path))
    tests = {t["name"]: t for t in data["tests"]}
    assert set(tests) == {"test_passes", "test_fails_with_message", "test_stub",
                          "test_uses_failing_fixture", "test_needs_gpu"}, proc.stdout
    assert all(t["assignment"] == "demo" and t["visibility"] == "hidden" for t in tests.values())
    assert tests["test_passes"]["outcome"] == "passed" and tests["test_passes"]["points"] == 2
    failed = tests["test_fails_with_message"]
    assert failed["outcome"] == "failed"
    assert failed["reason"] == "[rank 0 of 1] chunk 1 differs by 3e-2; did you average twice?"
    for name in ("test_stub", "test_uses_failing_fixture"):
        assert tests[name]["outcome"] == "failed" and tests[name]["not_implemented"], tests[name]
        assert tests[name]["reason"].startswith("not implemented yet: ring_all_reduce")
    gpu = tests["test_needs_gpu"]
    import torch

    if not torch.cuda.is_available():
        assert gpu["outcome"] == "skipped" and gpu["not_graded_here"]
    # The progress lines count finished tests (under xdist too), and the events carry each
    # test's launches; the session's total is in the results' timing.
    counters = sorted(int(n) for n in re.findall(r"\[\s*(\d+)\] demo", proc.stdout))
    assert counters == [1, 2, 3, 4, 5], proc.stdout
    events = [json.loads(line) for line in events_path.read_text().splitlines()]
    assert [e["event"] for e in events][::len(events) - 1] == ["session_start", "session_end"]
    ends = {e["name"]: e for e in events if e["event"] == "test_end"}
    assert set(ends) == set(tests) and ends["test_passes"]["launches"] == 1
    assert ends["test_passes"]["score"] == 2 and ends["test_stub"]["score"] == 0
    assert data["timing"]["launches"] == 3 == events[-1]["launches"]  # passes, stub, shared


def test_a_grading_test_without_points_is_a_collection_error(tmp_path):
    proc, _ = run_pytest(tmp_path, "def test_forgot_points():\n    pass\n")
    assert proc.returncode == 4
    assert "without @pytest.mark.points(n)" in proc.stderr + proc.stdout


def test_points_must_be_a_non_negative_int(tmp_path):
    proc, _ = run_pytest(tmp_path, "import pytest\n@pytest.mark.points(1.5)\ndef test_x():\n"
                                   "    pass\n")
    assert proc.returncode == 4 and "points must be a non-negative int" in proc.stderr


TRACEBACK_PROBE = '''
def pytest_runtest_logreport(report):
    if report.failed:
        with open({path!r}, "a") as f:
            f.write(type(report.longrepr.reprtraceback).__name__ + "\\n")
'''


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "no-terminal"])
def test_tracebacks_nobody_reads_are_formatted_without_parsing_sources(tmp_path, terminal):
    """Where the terminal is off (every grading session: reasons come from the exception), a
    failure's traceback is formatted natively, not with pytest's default style, which parses
    each frame's source with `ast` (a fifth of selfcheck's session CPU); a student reading a
    terminal keeps the default."""
    record = tmp_path / "styles.txt"
    (tmp_path / "tb_probe.py").write_text(TRACEBACK_PROBE.format(path=str(record)))
    suite = tmp_path / "hidden" / "demo"
    suite.mkdir(parents=True)
    (suite / "test_demo.py").write_text("import pytest\n@pytest.mark.points(1)\n"
                                        "def test_fails():\n    assert 1 == 2\n")
    cmd = [sys.executable, "-m", "pytest", "-p", "grader.session.plugin", "-p", "tb_probe",
           "--noconftest", *(["-q"] if terminal else []), "--hidden-root", str(tmp_path / "hidden"),
           "--mlsys-results", str(tmp_path / "results.json"), "-p", "no:cacheprovider",
           *([] if terminal else ["-p", "no:terminal"]), str(suite)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO_ROOT)])}
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    expected = "ReprTraceback" if terminal else "ReprTracebackNative"
    assert record.read_text().split() == [expected], proc.stdout + proc.stderr


def test_a_bad_impl_is_a_usage_error(tmp_path):
    proc, _ = run_pytest(tmp_path, SUITE, "--impl", "mutant:nope/none")
    assert proc.returncode == 4 and "no mutant file" in proc.stderr


ORDERED_SUITE = '''
import pytest

@pytest.mark.points(1)
def test_zz_unit_names_the_cause():
    assert False, "the unit: names the cause"

@pytest.mark.points(1)
def test_bb_integration():
    assert False, "the integration test: generic"

@pytest.mark.points(1)
@pytest.mark.parametrize("n", [10, 2])
def test_aa_last(n):
    pass
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_results_come_in_the_suites_order_not_alphabetically(tmp_path, workers):
    """Results (and so summary.md, the terminal table, results.json) list tests as the suite
    defines them: the unit test that names the cause before the integration test after it."""
    from grader.report.results import RunResult

    proc, data = run_pytest(tmp_path, ORDERED_SUITE, *workers)
    names = ["test_zz_unit_names_the_cause", "test_bb_integration", "test_aa_last[10]",
             "test_aa_last[2]"]
    assert [t["name"] for t in data["tests"]] == names, proc.stdout
    run = RunResult.from_json(data)
    [demo] = run.by_assignment()
    assert [t.name for t in demo.tests] == names
    assert next(t for t in run.ordered() if not t.passed).reason == "the unit: names the cause"

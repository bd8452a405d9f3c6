"""One pytest session grading several implementations (grader/session/plugin.py, `--impl` repeated).

The promise: each implementation gets exactly the results a session of its own would give it,
whatever the others do — crash their ranks, hang, leave a process behind, fail early and stop.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader.report.results import RunResult
from grader.session.plugin import REPO_ROOT

SUITE = '''
import pytest


def rank_value(ctx):
    return ctx.impl_module("toy", "toy").value(ctx.rank)


@pytest.fixture(scope="module")
def shared(launch):
    return launch(rank_value, world_size=2, timeout=5).values


@pytest.mark.points(2)
def test_shared_launch(shared):
    assert shared == [0, 10], f"value() gave {shared}, expected [0, 10]"


@pytest.mark.points(1)
def test_own_launch(launch):
    assert launch(rank_value, world_size=2, timeout=5).values == [0, 10]


@pytest.mark.points(1)
@pytest.mark.parametrize("world_size", [1, 3], ids=lambda n: f"world_size={n}")
def test_world_sizes(launch, world_size):
    values = launch(rank_value, world_size=world_size, timeout=5).values
    assert values == [10 * r for r in range(world_size)]


@pytest.mark.points(0)
def test_needs_no_implementation():
    assert True
'''

GOOD = "def value(rank):\n    return 10 * rank\n"
IMPLEMENTATIONS = {
    "good": GOOD,
    "wrong": "def value(rank):\n    return rank\n",
    "crash": "import os\n\ndef value(rank):\n    os._exit(3)\n",
    "hang": "import time\n\ndef value(rank):\n    time.sleep(600)\n",
    "leftover": ("import subprocess\n\ndef value(rank):\n"
                 "    subprocess.Popen(['sleep', '97.5'])\n    return 10 * rank\n"),
}


def write_course(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    suite = tmp_path / "hidden" / "toy"
    suite.mkdir(parents=True)
    (suite / "test_toy.py").write_text(textwrap.dedent(SUITE))
    folders = {}
    for name, source in IMPLEMENTATIONS.items():
        module = tmp_path / name / "toy" / "toy.py"
        module.parent.mkdir(parents=True)
        module.write_text(source)
        folders[name] = module.parent.parent
    return suite, folders


def run(tmp_path: Path, suite: Path, impls: list[Path], *extra: str, name: str = "r"
        ) -> dict[str, RunResult]:
    out = tmp_path / f"{name}.json"
    command = [sys.executable, "-m", "pytest", "-p", "grader.session.plugin", "--noconftest", "-q",
               "--hidden-root", str(suite.parent), "--mlsys-results", str(out),
               "-p", "no:cacheprovider", *extra, str(suite)]
    for impl in impls:
        command += ["--impl", str(impl)]
    subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    return {Path(run.impl).name: run for run in RunResult.load_all(out)}


def outcomes(run: RunResult) -> dict[str, tuple[str, int]]:
    return {t.nodeid.split("::")[-1]: (t.outcome, t.score) for t in run.tests}


def survivors(marker: str) -> str:
    return subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("engine")
    suite, folders = write_course(tmp_path)
    alone = run(tmp_path, suite, [folders["good"]], name="alone")["good"]
    return tmp_path, suite, folders, alone


def test_each_implementation_gets_what_a_session_of_its_own_gives(course):
    tmp_path, suite, folders, alone = course
    order = ["crash", "good", "hang", "leftover", "wrong"]
    runs = run(tmp_path, suite, [folders[n] for n in order], name="together")
    assert list(runs) == order
    assert outcomes(runs["good"]) == outcomes(alone)
    assert alone.score == 5 and runs["leftover"].score == 5
    assert set(outcomes(alone)) == {"test_shared_launch", "test_own_launch",
                                    "test_world_sizes[world_size=1]",
                                    "test_world_sizes[world_size=3]",
                                    "test_needs_no_implementation"}
    crashed = {t.name: t for t in runs["crash"].tests}
    assert crashed["test_own_launch"].outcome == "failed"
    assert "exit" in crashed["test_own_launch"].reason.lower()
    hung = {t.name: t for t in runs["hang"].tests}
    assert hung["test_shared_launch"].outcome in ("failed", "error")
    assert "5" in hung["test_shared_launch"].reason  # the launch's limit, named
    assert runs["wrong"].score == 1  # only the test that needs no implementation
    assert survivors("sleep 97.5") == "", "a rank's child outlived the session"


def test_stop_first_marks_the_rest_not_run_and_leaves_others_alone(course):
    tmp_path, suite, folders, alone = course
    wrong = str(folders["wrong"])
    runs = run(tmp_path, suite, [folders["good"], folders["wrong"]], "--stop-first", wrong,
               name="stop")
    assert outcomes(runs["good"]) == outcomes(alone)
    failed = [t for t in runs["wrong"].tests if not t.passed]
    assert len(failed) == 1
    ran = {t.nodeid for t in runs["wrong"].tests}
    assert runs["wrong"].not_run and not ran & set(runs["wrong"].not_run)
    assert len(ran) + len(runs["wrong"].not_run) == len(alone.tests)


def test_under_xdist_the_results_are_the_same(course):
    tmp_path, suite, folders, alone = course
    runs = run(tmp_path, suite, [folders["good"], folders["wrong"]], "-n", "2", name="xdist")
    assert outcomes(runs["good"]) == outcomes(alone)
    assert runs["wrong"].score == 1


def test_timing_says_where_the_session_went(course):
    tmp_path, suite, folders, alone = course
    timing = dict(alone.timing)
    assert {"collected", "forkserver_s", "launch_s", "session"} <= set(timing)
    assert 0 < timing["collected"] < timing["session"]
    assert timing["launch_s"] + timing["forkserver_s"] <= timing["session"]


def test_a_repeated_impl_and_an_unknown_stop_first_are_usage_errors(tmp_path):
    suite, folders = write_course(tmp_path)
    base = [sys.executable, "-m", "pytest", "-p", "grader.session.plugin", "--noconftest", "-q",
            "--hidden-root", str(suite.parent), "-p", "no:cacheprovider", str(suite)]
    twice = subprocess.run(base + ["--impl", str(folders["good"])] * 2, cwd=REPO_ROOT,
                           capture_output=True, text=True, timeout=120)
    assert twice.returncode == 4 and "given twice" in twice.stderr
    unknown = subprocess.run(base + ["--impl", str(folders["good"]), "--stop-first",
                                     "solutions"], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=120)
    assert unknown.returncode == 4 and "is not one of the --impl values" in unknown.stderr
    sandboxed = subprocess.run(base + ["--impl", str(folders["good"]), "--impl",
                                       str(folders["wrong"]), "--sandbox", "on"],
                               cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert sandboxed.returncode == 4 and "one implementation per session" in sandboxed.stderr


def test_a_usage_error_is_answered_before_torch_is_imported(tmp_path):
    """A mistyped command line costs no torch import (seconds): the checks come first."""
    suite, folders = write_course(tmp_path)
    args = ["-p", "grader.session.plugin", "--noconftest", "-q", "--hidden-root",
            str(suite.parent), "-p", "no:cacheprovider", str(suite),
            "--impl", str(folders["good"]), "--impl", str(folders["good"])]
    code = ("import sys, pytest; rc = pytest.main(sys.argv[1:]); "
            "print('exit', int(rc), 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip().splitlines()[-1] == "exit 4 False", proc.stdout + proc.stderr


def test_results_file_of_several_runs_round_trips(tmp_path):
    first = RunResult("solutions", (), not_run=("a::b",), timing=(("session", 1.5),))
    RunResult.save_all([first, RunResult("assignments", ())], tmp_path / "r.json")
    loaded = RunResult.load_all(tmp_path / "r.json")
    assert [r.impl for r in loaded] == ["solutions", "assignments"]
    assert loaded[0] == first
    assert json.loads((tmp_path / "r.json").read_text())["runs"][1]["not_run"] == []

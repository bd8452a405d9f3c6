"""The isolated pytest session: its command line, its environment, and the kill on timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from grader.manifest import REPO_ROOT
from grader.session.runner import (
    hidden_root,
    isolated_env,
    pytest_command,
    run_session,
    suite_paths,
)
from grader.tests._fakes import make_course
from harness.impl import resolve_impl


def test_command_is_isolated_and_loads_only_our_plugins(tmp_path):
    command = pytest_command([tmp_path / "suites"], resolve_impl("solutions"), tmp_path / "r.json",
                             root=tmp_path, suites=tmp_path / "suites")
    assert command[1:3] == ["-I", "-c"]
    assert "sys.path.insert(0," in command[3] and "pytest.main()" in command[3]
    joined = " ".join(command[4:])
    for part in ("--noconftest", "-p grader.session.plugin", "--graded",
                 "--impl solutions", f"--mlsys-results {tmp_path / 'r.json'}",
                 f"--rootdir={tmp_path}", f"--hidden-root {tmp_path / 'suites'}"):
        assert part in joined, part
    assert "-x" not in command and "-n" not in command
    assert "--mlsys-progress" not in command, "progress is rendered from the events"
    evented = pytest_command([], resolve_impl("solutions"), tmp_path / "r.json", events="fd:7",
                             progress=True)
    assert "--mlsys-events fd:7" in " ".join(evented) and "--mlsys-progress" in evented
    assert "xdist.plugin" not in command, "xdist is loaded only where it runs (its start-up)"
    command = pytest_command([], resolve_impl("assignments"), tmp_path / "r.json", workers=2,
                            stop_first=True)
    assert command[-3:] == ["-n", "2", "-x"]
    assert "-p xdist.plugin" in " ".join(command)


def test_environment_disables_plugin_autoload(monkeypatch):
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p evil")
    env = isolated_env()
    assert env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"
    assert "PYTEST_ADDOPTS" not in env


def test_suite_paths_list_what_exists(tmp_path):
    root = make_course(tmp_path)
    assert suite_paths("toy", root, root / "suites") == [root / "suites" / "toy"]
    assert suite_paths("toy", root) == []  # no grader/suites/toy in the toy course
    public = root / "assignments" / "toy" / "test_public.py"
    public.write_text("", encoding="utf-8")
    assert suite_paths("toy", root, root / "suites") == [public, root / "suites" / "toy"]
    assert hidden_root(root) == root / "grader" / "suites"


HANGING_SUITE = '''
import os
import pathlib
import subprocess
import sys
import time

import pytest


@pytest.mark.points(1)
def test_hangs():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    pathlib.Path(os.environ["MLSYS_TEST_PIDS"]).write_text(f"{os.getpid()} {child.pid}")
    time.sleep(600)
'''


def test_a_hanging_session_is_killed_with_its_process_group(tmp_path, monkeypatch):
    root = make_course(tmp_path, suite=HANGING_SUITE)
    pid_file = tmp_path / "pids"
    monkeypatch.setenv("MLSYS_TEST_PIDS", str(pid_file))
    start = time.monotonic()
    session = run_session([root / "suites" / "toy"], resolve_impl("assignments", root), timeout=20,
                          root=root,
                          suites=root / "suites")
    assert session.timed_out and session.result is None
    assert "ran past 20 s and was killed" in session.problem
    assert time.monotonic() - start < 60
    if pid_file.exists():  # the machine may be too loaded for pytest to get that far
        for pid in map(int, pid_file.read_text().split()):
            assert not _alive(pid), f"process {pid} outlived its session"


def _alive(pid: int) -> bool:
    deadline = time.monotonic() + 5  # the orphaned child is reaped by init shortly
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        if Path(f"/proc/{pid}/stat").exists() and " Z " in Path(f"/proc/{pid}/stat").read_text():
            return False  # a zombie holds no resources; only its parent can reap it
        time.sleep(0.1)
    return True


def test_sigterm_to_selfcheck_ends_its_running_sessions(tmp_path):
    root = make_course(tmp_path, suite=HANGING_SUITE)
    pid_file = tmp_path / "pids"
    env = {**os.environ, "MLSYS_TEST_PIDS": str(pid_file)}
    command = [sys.executable, "-m", "grader", "--root", str(root), "selfcheck",
               "--suites", str(root / "suites"), "--jobs", "1"]
    grader = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert pid_file.exists(), "the hanging test never started"
        time.sleep(0.2)  # the file is written before the test sleeps
        grader.send_signal(signal.SIGTERM)
        assert grader.wait(timeout=30) == 128 + signal.SIGTERM
        for pid in map(int, pid_file.read_text().split()):
            assert not _alive(pid), f"process {pid} outlived the grader"
    finally:
        grader.kill()
        grader.wait()


def test_events_come_in_order_and_render_the_progress_lines(tmp_path):
    root = make_course(tmp_path)
    events, lines = [], []
    session = run_session([root / "suites" / "toy"],
                          [resolve_impl("solutions", root), resolve_impl("assignments", root)],
                          timeout=120, root=root, suites=root / "suites",
                          on_event=events.append, on_line=lines.append)
    assert session.result is not None and not session.problem
    kinds = [e["event"] for e in events]
    assert kinds[0] == "session_start" and kinds[-1] == "session_end", kinds
    assert events[0]["impls"] == ["solutions", "assignments"]
    ends = [e for e in events if e["event"] == "test_end"]
    assert [e["done"] for e in ends] == list(range(1, len(ends) + 1))
    assert {0, 1} <= {e["index"] for e in ends} and kinds.count("test_start") == len(ends)
    stub = [e for e in ends if e["impl"] == "assignments"]
    assert any(e["outcome"] == "failed" for e in stub)
    assert all(e["score"] == 0 for e in stub if e["outcome"] != "passed")
    rendered = [line for line in lines if line.startswith("[")]
    assert len(rendered) == len(ends)
    assert any("assignments toy" in line and " FAIL" in line for line in rendered), rendered


INTERRUPTED_SUITE = '''
import time

import pytest


@pytest.mark.points(1)
def test_quick():
    pass


@pytest.mark.points(1)
def test_slow():
    time.sleep(600)
'''


def test_interrupt_ends_the_session_and_keeps_what_finished(tmp_path):
    root = make_course(tmp_path, suite=INTERRUPTED_SUITE)
    seen: list[str] = []
    session = run_session([root / "suites" / "toy"], resolve_impl("assignments", root),
                          timeout=300, root=root, suites=root / "suites",
                          on_event=lambda e: seen.append(str(e.get("name"))),
                          interrupt=lambda now: "test_quick" in seen)
    assert session.interrupted and not session.timed_out and not session.problem
    assert session.result is not None
    assert "test_quick" in [t.name for t in session.result.tests if t.passed]
    # (the interrupted test_slow is in the results as far as it got: the driver that
    # interrupts judges it, as grader/instructor/mutate/batch.py's `settle` does)

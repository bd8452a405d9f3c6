"""grader/instructor/mutate/batch.py: many mutants per pytest session, one verdict each.

The promise: a mutant that crashes the session or runs past its time gets its own verdict and
changes no other mutant's.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from grader.instructor.mutate.batch import (
    BatchEngine,
    BatchRun,
    Clock,
    deal,
    interruptible,
    settle,
)
from grader.instructor.mutate.runner import Verdict
from grader.report.results import RunResult
from grader.tests._fakes import make_course, run_json
from harness.impl import ImplSpec


def line(index: int | None, status: str = "ok", name: str = "test_add") -> dict:
    """A `test_end` event as grader/session/events.py writes it in a session of several
    implementations."""
    failed = status == "FAIL"
    return {"event": "test_end", "nodeid": f"suites/toy/test_x.py::{name}",
            "impl": f"dir{index}" if index is not None else "",
            "index": index if index is not None else -1, "assignment": "toy", "name": name,
            "points": 2, "score": 0 if failed else 2, "outcome": "failed" if failed else "passed",
            "reason": "add(2, 3) should be 5" if failed else "", "done": 1}


def test_the_clock_follows_the_implementation_running():
    clock = Clock(3, started=0.0)
    clock.feed({"event": "test_start", "nodeid": "x", "impl": "dir0", "index": 0}, 1.0)
    assert (clock.current, clock.since) == (0, 0.0) and clock.silent
    clock.feed(line(0), 5.0)
    assert clock.suspect() == (0, True)  # dir0 reported a pass: dir1 may be the one running
    clock.feed(line(0, "FAIL"), 6.0)  # dir0 stops at its first failure: dir1 starts now
    assert (clock.current, clock.since) == (1, 6.0) and clock.suspect() == (1, False)
    assert not clock.overrun(20.0, limit=15.0) and clock.overrun(21.5, limit=15.0)
    clock.feed(line(1), 8.0)
    clock.feed(line(2), 9.0)  # dir1 passed everything; dir2 began after dir1's last line
    assert (clock.current, clock.since) == (2, 8.0)
    clock.feed(line(None, name="test_needs_no_implementation"), 9.5)  # unlabelled: ignored
    clock.feed(line(2, "FAIL"), 10.0)
    assert clock.current == 3 and not clock.overrun(1000.0, limit=1.0)


def test_deal_spreads_neighbours_over_batches():
    items = [(str(i), Path(str(i))) for i in range(10)]
    batches = deal(items, batch_size=4, jobs=2)
    assert [[key for key, _ in b] for b in batches] == [
        ["0", "3", "6", "9"], ["1", "4", "7"], ["2", "5", "8"]]
    assert len(deal(items, batch_size=100, jobs=2)) == 2  # one per job at least
    assert deal(items[:1], batch_size=4, jobs=2) == [items[:1]] and deal([], 4, 2) == []


def _queue(n: int):
    return [(f"m{i}", ImplSpec(kind="dir", root=f"/tmp/mutant{i}", text=f"/tmp/mutant{i}"))
            for i in range(n)]


def _run(impl: str, failed: bool) -> RunResult:
    entry_outcome = "failed" if failed else "passed"
    data = run_json([{"nodeid": "suites/toy/test_x.py::test_add", "name": "test_add",
                      "assignment": "toy", "visibility": "hidden", "points": 2,
                      "outcome": entry_outcome, "reason": "wrong" if failed else "",
                      "not_implemented": False, "not_graded_here": False, "duration": 0.5}],
                    impl=impl)
    return RunResult.from_json(data)


def test_an_overrun_is_blamed_on_the_one_running_and_the_rest_go_on():
    queue = _queue(4)
    clock = Clock(4, 0.0)
    for fed in (line(0, "FAIL"), line(1)):  # m0 killed; m1 passed a test, then nothing
        clock.feed(fed, 1.0)
    runs = [_run(queue[0][1].text, True), _run(queue[1][1].text, False), None, None]
    overran = BatchRun(runs, clock, overran=True, returncode=2, wall_s=60.0, tail="")
    verdicts, rest, alone = settle(queue, overran, timeout=30.0)
    # m1 is on the clock but reported a pass: the overrun may be m2's; m1 is graded alone.
    assert [(k, v.status) for k, v in verdicts] == [("m0", "killed")]
    assert alone == queue[1] and rest == queue[2:]
    clock.feed(line(1, "FAIL"), 2.0)  # now m2 is surely the one running
    verdicts, rest, alone = settle(queue, overran, timeout=30.0)
    assert [(k, v.status) for k, v in verdicts][-1] == ("m2", "timed_out")
    assert "30 s" in verdicts[-1][1].reason and alone is None and rest == queue[3:]


def test_a_session_that_died_blames_one_and_grades_the_rest_again():
    queue = _queue(3)
    clock = Clock(3, 0.0)
    clock.feed(line(0, "FAIL"), 1.0)
    died = BatchRun([None] * 3, clock, overran=False, returncode=-9, wall_s=5.0, tail="",
                    problem="the pytest run wrote no results file")
    verdicts, rest, alone = settle(queue, died, timeout=30.0)
    assert [(k, v.status) for k, v in verdicts] == [("m1", "error")]
    assert "wrote no results" in verdicts[0][1].reason
    assert rest == [queue[0], queue[2]] and alone is None  # m0 finished but left no results
    nothing = BatchRun([None] * 3, Clock(3, 0.0), overran=False, returncode=4, wall_s=1.0,
                       tail="", problem="usage error")
    verdicts, rest, alone = settle(queue, nothing, timeout=30.0)
    assert [v.status for _, v in verdicts] == ["error"] * 3 and rest == [] and alone is None


SLOW = '''\
import time


def add(a: int, b: int = 0) -> int:
    """a + b, after a long while."""
    time.sleep(300)
    return a + b
'''
CRASH = '''\
import os


def add(a: int, b: int = 0) -> int:
    """Ends the process that calls it."""
    os._exit(3)
'''
WRONG = "def add(a: int, b: int = 0) -> int:\n    return a - b\n"
GOOD = "def add(a: int, b: int = 0) -> int:\n    return b + a\n"


def test_a_crash_and_a_hang_get_their_own_verdicts_and_change_no_other(tmp_path):
    # The toy suite calls the code in the pytest process (grader/tests/_fakes.py), so here a
    # mutant can kill the session itself or hang it outside any launch's limit.
    root = make_course(tmp_path / "course")
    folders = {}
    for name, source in {"wrong": WRONG, "good": GOOD, "crash": CRASH, "slow": SLOW,
                         "good2": GOOD}.items():
        module = tmp_path / name / "toy" / "toy.py"
        module.parent.mkdir(parents=True)
        module.write_text(source)
        folders[name] = module.parent.parent
    suites = root / "suites"
    engine = BatchEngine([suites / "toy"], root, suites, jobs=1, batch_size=10)
    verdicts: dict[str, Verdict] = {}
    engine.run(list(folders.items()), 20.0, lambda key, v: verdicts.__setitem__(key, v))
    assert {k: v.status for k, v in verdicts.items()} == {
        "wrong": "killed", "good": "survived", "crash": "error", "slow": "timed_out",
        "good2": "survived"}
    assert verdicts["wrong"].killed_by.endswith("test_add")
    assert "20 s" in verdicts["slow"].reason
    assert verdicts["good"].tests_run == verdicts["good2"].tests_run  # the same 5 tests
    assert len(verdicts["good"].tests_run) == 5


def test_the_session_handles_sigint_even_when_started_ignoring_it():
    # `grader mutate ... &` from a shell ignores SIGINT, and children inherit that.
    probe = [sys.executable, "-I", "-c", "import signal; print(signal.getsignal(signal.SIGINT) "
             "is signal.default_int_handler)"]
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        plain = subprocess.run(probe, capture_output=True, text=True, timeout=60).stdout
        rearmed = subprocess.run(interruptible(probe), capture_output=True, text=True,
                                 timeout=60).stdout
    finally:
        signal.signal(signal.SIGINT, previous)
    assert (plain.strip(), rearmed.strip()) == ("False", "True")

"""Run one graded pytest session in a subprocess and read back what the plugin recorded.

The session is isolated from anything a submission could plant: `python -I` ignores PYTHON*
environment variables, the user site directory and the current directory; `--noconftest`
skips every conftest.py; `PYTEST_DISABLE_PLUGIN_AUTOLOAD=1` loads no installed plugin except
the two named with `-p`. Because `-I` leaves the repository off `sys.path`, the command is a
two-line `-c` bootstrap that inserts the repository root and then enters pytest's own
`console_main()`; xdist workers inherit that `sys.path` from the controller.

The plugin's `--mlsys-results` file is the only channel from the session back to us; its
terminal output (`-q --tb=no`: no tracebacks, so no hidden source) is only shown as progress.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from grader.manifest import REPO_ROOT
from grader.results import RunResult

if TYPE_CHECKING:  # harness pulls in torch
    from harness.impl import ImplSpec

_BOOTSTRAP = (
    "import sys; sys.path.insert(0, {root!r}); import pytest; "
    "sys.argv[0] = 'pytest'; raise SystemExit(pytest.main())"
)
# pytest exit codes that mean the run itself went wrong, not that tests failed.
PYTEST_ERROR_CODES = {
    2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests collected",
}


@dataclass(frozen=True)
class Session:
    """What came back from one pytest subprocess."""

    returncode: int
    timed_out: bool
    wall_s: float
    output_tail: str
    result: RunResult | None  # None when the plugin wrote no (readable) results
    problem: str = ""  # why `result` is None, or why the run is not trustworthy
    # A session grading several implementations: one run each, in --impl order (`result` is
    # the first); `for_impl` gives the view of one of them.
    results: tuple[RunResult, ...] = ()

    def for_impl(self, impl: ImplSpec) -> Session:
        """This session as if it had graded `impl` alone (its run, or None with a problem)."""
        run = next((r for r in self.results if r.impl == impl.text), None)
        problem = self.problem
        if run is None and not problem:
            problem = f"the session wrote no results for {impl.text}"
        return Session(self.returncode, self.timed_out, self.wall_s, self.output_tail, run,
                       problem, (run,) if run else ())

    def for_assignment(self, assignment_id: str) -> Session:
        """This session (of one implementation) as if it had graded `assignment_id` alone: its
        tests, and the collection errors of its suite files (those naming no assignment's
        folder too). Wall time and problems stay the session's."""
        run = self.result
        if run is None:
            return replace(self, results=())
        folder = f"/{assignment_id}/"
        errors = tuple(e for e in run.collection_errors
                       if folder in f"/{e}" or not re.search(r"/[a-z0-9_]+/test_", f"/{e}"))
        tests = tuple(t for t in run.tests if t.assignment == assignment_id)
        mine = replace(run, tests=tests, collection_errors=errors,
                       not_run=tuple(n for n in run.not_run if folder in f"/{n}"))
        return replace(self, result=mine, results=(mine,))


def pytest_command(
    paths: Sequence[str | Path],
    impl: ImplSpec | Sequence[ImplSpec],
    results_path: Path,
    *,
    workers: int = 0,
    stop_first: bool | Collection[ImplSpec] = False,
    progress: bool = True,
    root: Path = REPO_ROOT,
    suites: Path | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The argv of an isolated graded pytest session over `paths` (files or directories).

    `impl` is the resolved --impl, handed on as a value the session's plugin resolves to the
    same spec; several of them grade each in turn in the one session (grader/plugin.py), and
    `stop_first` then names those that stop at their first failure (`True`: all of them).
    `root` is the course checkout the session grades (pytest's rootdir); the grader
    itself is always imported from the checkout this module lives in. Tests under `suites`
    (default `root/grader/suites`) are the hidden ones.
    """
    command = [sys.executable, "-I", "-c", _BOOTSTRAP.format(root=str(REPO_ROOT))]
    command += ["--noconftest", "-p", "grader.plugin", "--graded"]
    if workers > 0:  # xdist's start-up only where it runs
        command += ["-p", "xdist.plugin"]
    impls: list[ImplSpec] = list(impl) if isinstance(impl, (list, tuple)) else [impl]  # type: ignore[list-item]
    for spec in impls:
        command += ["--impl", spec.argument]
    command += ["--mlsys-results", str(results_path), f"--rootdir={root}"]
    command += ["--hidden-root", str(hidden_root(root, suites))]
    # A broken suite file must not stop the others from grading; it is still reported.
    command += ["-p", "no:terminal", "-p", "no:cacheprovider", "--continue-on-collection-errors"]
    if progress:
        command.append("--mlsys-progress")
    if workers > 0:
        command += ["-n", str(workers)]
    if stop_first is True and len(impls) == 1:
        command.append("-x")
    elif stop_first:
        stopping: list[ImplSpec] = impls if stop_first is True else list(stop_first)
        for spec in stopping:
            command += ["--stop-first", spec.argument]
    command += list(extra)
    command += [str(p) for p in paths]
    return command


def run_session(
    paths: Sequence[str | Path],
    impl: ImplSpec | Sequence[ImplSpec],
    *,
    workers: int = 0,
    stop_first: bool | Collection[ImplSpec] = False,
    timeout: float = 1800.0,
    on_line: Callable[[str], None] | None = None,
    root: Path = REPO_ROOT,
    suites: Path | None = None,
    extra: Sequence[str] = (),
) -> Session:
    """Run the session, stream its output lines to `on_line`, and load the plugin's results.

    A session running longer than `timeout` seconds is killed with its whole process group.
    """
    with tempfile.TemporaryDirectory(prefix="mlsys-grade-") as tmp:
        results_path = Path(tmp) / "session.json"
        command = pytest_command(
            paths, impl, results_path, workers=workers, stop_first=stop_first,
            progress=on_line is not None, root=root, suites=suites, extra=extra,
        )
        returncode, timed_out, wall_s, tail = _run(command, root, timeout, on_line)
        result, results, problem = None, [], ""
        if timed_out:
            problem = f"the pytest session ran past {timeout:.0f} s and was killed"
        try:
            results = RunResult.load_all(results_path)
            result = results[0] if results else None
        except ValueError as exc:
            last = [line for line in tail.splitlines() if line.strip()][-2:]
            detail = f" (pytest exit {returncode}: {' / '.join(last)})" if last else ""
            problem = problem or f"{exc}{detail}"
        collection_failed = result is not None and bool(result.collection_errors)
        if result is not None and returncode in PYTEST_ERROR_CODES and not problem \
                and not (returncode == 2 and collection_failed):  # reported as such
            problem = f"pytest exited with {returncode} ({PYTEST_ERROR_CODES[returncode]})"
        return Session(returncode, timed_out, wall_s, tail, result, problem, tuple(results))


def suite_paths(assignment_id: str, root: Path, suites: Path | None = None) -> list[Path]:
    """The test files of one assignment that exist: public tests, then the hidden suite dir.

    A student release ships no hidden suites, so a missing hidden directory is not an error.
    """
    public = root / "assignments" / assignment_id / "test_public.py"
    hidden = hidden_root(root, suites) / assignment_id
    has_hidden = hidden.is_dir() and any(hidden.rglob("test_*.py"))
    return [p for p, ok in ((public, public.is_file()), (hidden, has_hidden)) if ok]


def hidden_root(root: Path, suites: Path | None = None) -> Path:
    """The folder of hidden suites: `suites` when given, else `root/grader/suites`."""
    return suites if suites is not None else root / "grader" / "suites"


def isolated_env() -> dict[str, str]:
    """The environment of a graded session: ours, minus plugin autoloading."""
    env = dict(os.environ)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PYTEST_ADDOPTS", None)  # an inherited -p or -k would change what is graded
    return env


class SessionsStopped(RuntimeError):
    """`stop_all_sessions()` was called: no new session starts."""


_live: set[subprocess.Popen] = set()
_live_lock = threading.Lock()
_stopping = threading.Event()


def stop_all_sessions() -> None:
    """Kill every running session's process group and refuse new ones (on Ctrl-C, SIGTERM).

    Sessions run in worker threads under selfcheck; only the main thread sees the signal, so
    it must end the sessions itself or wait for all of them.
    """
    _stopping.set()
    with _live_lock:
        live = list(_live)
    for process in live:
        kill_group(process)


def _run(
    command: list[str], cwd: Path, timeout: float, on_line: Callable[[str], None] | None
) -> tuple[int, bool, float, str]:
    start = time.perf_counter()
    with _live_lock:
        if _stopping.is_set():
            raise SessionsStopped("the grader is stopping; no new pytest session")
        process = subprocess.Popen(
            command, cwd=cwd, env=isolated_env(), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, errors="replace",
            start_new_session=True,
        )
        _live.add(process)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        kill_group(process)

    watchdog = threading.Timer(timeout, expire)
    watchdog.daemon = True
    watchdog.start()
    tail: list[str] = []
    try:
        for line in process.stdout or ():
            line = line.rstrip("\n")
            tail = (tail + [line])[-40:]
            if on_line is not None:
                on_line(line)
        process.wait()
    except BaseException:
        kill_group(process)
        raise
    finally:
        watchdog.cancel()
        with _live_lock:
            _live.discard(process)
    # Leftovers of the session (rank processes a killed test left behind) go with it.
    kill_group(process)
    return process.returncode, expired.is_set(), time.perf_counter() - start, "\n".join(tail)


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the process group a session was started in (`start_new_session=True`), then
    reap its leader, waiting up to 10 s."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass

"""Run one graded pytest session in a subprocess and read back what the plugin recorded.

The session is isolated from anything a submission could plant: `python -I` ignores PYTHON*
environment variables, the user site directory and the current directory; `--noconftest`
skips every conftest.py; `PYTEST_DISABLE_PLUGIN_AUTOLOAD=1` loads no installed plugin except
the two named with `-p`. Because `-I` leaves the repository off `sys.path`, the command is a
two-line `-c` bootstrap that inserts the repository root and then enters pytest's own
`console_main()`; xdist workers inherit that `sys.path` from the controller.

The plugin's `--mlsys-results` file is the only channel of verdicts from the session back to
us. Its progress comes as events (grader/session/events.py: JSON lines on a pipe the session
inherits as `--mlsys-events fd:N`), handed to `on_event` and rendered as the progress lines
`on_line` gets; the session's own terminal output (`-p no:terminal`: no tracebacks, so no hidden
source) goes to `on_line` too. `run_session` is the one driver of a graded session: `grader
grade`, selfcheck, mutate and the adversarial corpus all run theirs through it (the last three
several at a time through `grader/instructor/pool.py`).
"""

from __future__ import annotations

import json
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
from typing import TYPE_CHECKING, Any

from grader.manifest import REPO_ROOT
from grader.report.results import RunResult

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
INTERRUPT_GRACE_S = 30.0  # after SIGINT, how long pytest may take to write its results
EventHandler = Callable[[dict[str, Any]], None]


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
    interrupted: bool = False  # `interrupt` asked for it: SIGINT, results of what finished

    def for_impl(self, impl: ImplSpec) -> Session:
        """This session as if it had graded `impl` alone (its run, or None with a problem)."""
        run = next((r for r in self.results if r.impl == impl.text), None)
        problem = self.problem
        if run is None and not problem:
            problem = f"the session wrote no results for {impl.text}"
        return Session(self.returncode, self.timed_out, self.wall_s, self.output_tail, run,
                       problem, (run,) if run else (), self.interrupted)

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
    progress: bool = False,
    root: Path = REPO_ROOT,
    suites: Path | None = None,
    extra: Sequence[str] = (),
    events: str | None = None,
) -> list[str]:
    """The argv of an isolated graded pytest session over `paths` (files or directories).

    `impl` is the resolved --impl, handed on as a value the session's plugin resolves to the
    same spec; several of them grade each in turn in the one session (grader/session/plugin.py), and
    `stop_first` then names those that stop at their first failure (`True`: all of them).
    `root` is the course checkout the session grades (pytest's rootdir); the grader
    itself is always imported from the checkout this module lives in. Tests under `suites`
    (default `root/grader/suites`) are the hidden ones. `events`: the plugin's event channel
    (`fd:N` or a path); `progress`: print the progress lines on the session's own output.
    """
    command = [sys.executable, "-I", "-c", _BOOTSTRAP.format(root=str(REPO_ROOT))]
    command += ["--noconftest", "-p", "grader.session.plugin", "--graded"]
    if workers > 0:  # xdist's start-up only where it runs
        command += ["-p", "xdist.plugin"]
    impls: list[ImplSpec] = list(impl) if isinstance(impl, (list, tuple)) else [impl]  # type: ignore[list-item]
    for spec in impls:
        command += ["--impl", spec.argument]
    command += ["--mlsys-results", str(results_path), f"--rootdir={root}"]
    command += ["--hidden-root", str(hidden_root(root, suites))]
    # A broken suite file must not stop the others from grading; it is still reported.
    command += ["-p", "no:terminal", "-p", "no:cacheprovider", "--continue-on-collection-errors"]
    if events:
        command += ["--mlsys-events", events]
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
    on_event: EventHandler | None = None,
    interrupt: Callable[[float], bool] | None = None,
    root: Path = REPO_ROOT,
    suites: Path | None = None,
    extra: Sequence[str] = (),
) -> Session:
    """Run the session and load the plugin's results.

    Its events (grader/session/events.py) go to `on_event` as they come, in the order written;
    `on_line` gets each finished test's progress line and the session's own output lines.
    `interrupt(now)` (`time.perf_counter()`), asked twice a second, ends the session with
    SIGINT when it says so: pytest writes the results of what finished
    (`Session.interrupted`), or is killed `INTERRUPT_GRACE_S` later. A session running longer
    than `timeout` seconds is killed with its whole process group.
    """
    with tempfile.TemporaryDirectory(prefix="mlsys-grade-") as tmp:
        results_path = Path(tmp) / "session.json"
        read_fd, write_fd = os.pipe()
        try:
            command = pytest_command(
                paths, impl, results_path, workers=workers, stop_first=stop_first,
                progress=False, root=root, suites=suites, extra=extra, events=f"fd:{write_fd}",
            )
            if interrupt is not None:
                command = interruptible(command)
            reader = _EventReader(read_fd, on_event, on_line)
            read_fd = -1  # the reader owns it
            returncode, timed_out, wall_s, tail, interrupted = _run(
                command, root, timeout, on_line, interrupt, write_fd, reader)
        finally:
            if read_fd >= 0:
                os.close(read_fd)
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
                and not (returncode == 2 and collection_failed) and not interrupted:
            problem = f"pytest exited with {returncode} ({PYTEST_ERROR_CODES[returncode]})"
        return Session(returncode, timed_out, wall_s, tail, result, problem, tuple(results),
                       interrupted)


class _EventReader:
    """Reads the session's event pipe in a thread: each event to `on_event`, each `test_end`
    rendered to `on_line`. A line that is not an event is dropped (progress only)."""

    def __init__(self, fd: int, on_event: EventHandler | None,
                 on_line: Callable[[str], None] | None) -> None:
        from grader.session.events import progress_line

        self._stream = os.fdopen(fd, "r", encoding="utf-8", errors="replace")
        self._on_event, self._on_line, self._render = on_event, on_line, progress_line
        self._multi = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for text in self._stream:
            try:
                event = json.loads(text)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            if event.get("event") == "session_start":
                self._multi = len(event.get("impls") or ()) > 1
            if self._on_event is not None:
                self._on_event(event)
            if self._on_line is not None and event.get("event") == "test_end":
                self._on_line(self._render(event, multi=self._multi))

    def close(self, wait: float = 5.0) -> None:
        """Wait up to `wait` s for the rest of the events (the writer has ended)."""
        self._thread.join(wait)
        if not self._thread.is_alive():
            self._stream.close()


def interruptible(command: list[str]) -> list[str]:
    """The session's command with SIGINT handled as Ctrl-C whatever we inherited.

    A process started in the background by a shell ignores SIGINT, and its children inherit
    that; the bootstrap re-arms Python's handler so the driver's SIGINT still reaches pytest.
    """
    rearm = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    if len(command) > 3 and command[2] == "-c" and not command[3].startswith(rearm):
        command = [*command[:3], rearm + command[3], *command[4:]]
    return command


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
    command: list[str], cwd: Path, timeout: float, on_line: Callable[[str], None] | None,
    interrupt: Callable[[float], bool] | None, events_fd: int, reader: _EventReader,
) -> tuple[int, bool, float, str, bool]:
    start = time.perf_counter()
    try:
        with _live_lock:
            if _stopping.is_set():
                raise SessionsStopped("the grader is stopping; no new pytest session")
            process = subprocess.Popen(
                command, cwd=cwd, env=isolated_env(), stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                errors="replace", start_new_session=True, pass_fds=(events_fd,),
            )
            _live.add(process)
    finally:
        os.close(events_fd)  # the session holds the only write end now
    expired, interrupted, ended = threading.Event(), threading.Event(), threading.Event()

    def watch() -> None:
        deadline = start + timeout
        while not ended.wait(0.5):
            now = time.perf_counter()
            if now > deadline:
                expired.set()
                kill_group(process)
                return
            if interrupt is not None and interrupt(now):
                interrupted.set()
                try:  # pytest writes the results of what finished when interrupted
                    os.kill(process.pid, signal.SIGINT)
                except ProcessLookupError:
                    return
                if not ended.wait(min(INTERRUPT_GRACE_S, max(deadline - now, 0.0))):
                    kill_group(process)
                return

    watchdog = threading.Thread(target=watch, daemon=True)
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
        ended.set()
        watchdog.join()
        with _live_lock:
            _live.discard(process)
    # Leftovers of the session (rank processes a killed test left behind) go with it.
    kill_group(process)
    reader.close()
    return (process.returncode, expired.is_set(), time.perf_counter() - start, "\n".join(tail),
            interrupted.is_set())


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

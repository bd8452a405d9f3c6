"""The graded session's event channel: one JSON object per line, written by the controller.

`--mlsys-events fd:N` (a pipe the runner opened) or `--mlsys-events PATH` names the channel.
Every event has `"event"` (its kind) and `"t"` (seconds since the plugin loaded):

- `session_start`: `impls`, the implementation labels in `--impl` order;
- `test_start`: `nodeid`, `impl` (its label, "" when it runs once for all), `index` (of `impl`
  in `impls`, -1 for none);
- `test_end`: the same, and `assignment`, `name`, `points`, `score`, `outcome` ("passed",
  "failed", "error", "skipped"), `reason`, `done` (tests finished so far), `launches` and
  `launch_s` (the harness launches the test made, and their seconds);
- `session_end`: `exitstatus`, `launches` (all of the session's).

It carries progress only: verdicts come from the `--mlsys-results` file alone. The human
progress line (`--mlsys-progress`, `grader grade`'s output) is `progress_line(event)` of a
`test_end`; instructors' drivers (grader/session/runner.py `run_session(on_event=...)`) read the
dicts.

Not a plugin itself: `grader/session/plugin.py` opens the channel, `grader/session/outcomes.py`'s
hooks write the events.
"""

from __future__ import annotations

import json
import os
import time
from typing import IO, Any

import pytest

from grader.session.state import PLUGIN_LOADED, STATE, SessionState

EVENT_KINDS = ("session_start", "test_start", "test_end", "session_end")


def open_channel(target: str) -> IO[str]:
    """The writable text stream `target` names: `fd:N` (an inherited descriptor, made
    non-inheritable so that no process the session starts holds it) or a file path."""
    if target.startswith("fd:"):
        fd = int(target[3:])
        os.set_inheritable(fd, False)
        return os.fdopen(fd, "w", buffering=1, encoding="utf-8")
    return open(target, "w", buffering=1, encoding="utf-8")


def emit(state: SessionState, kind: str, **fields: Any) -> None:
    """Write one event to the session's channel and, for `test_end` with `--mlsys-progress`,
    print its progress line."""
    if kind not in EVENT_KINDS:
        raise ValueError(f"unknown event kind {kind!r}; one of {EVENT_KINDS}")
    event = {"event": kind, "t": round(time.perf_counter() - PLUGIN_LOADED, 3), **fields}
    if state.events is not None:
        try:
            state.events.write(json.dumps(event) + "\n")
        except (OSError, ValueError):  # the reader went away: progress only, grading goes on
            state.events = None
    if kind == "test_end" and state.progress:
        print(progress_line(event, multi=state.multi), flush=True)


def progress_line(event: dict[str, Any], *, multi: bool | None = None) -> str:
    """The human line of a `test_end` event:
    `[  12] dir3 ring_allreduce     test_name...   0/2   FAIL  reason`.

    The implementation's label is shown in a session of several (`multi`; by default when
    the event names one)."""
    label = str(event.get("impl", ""))
    show = bool(label) if multi is None else multi
    outcome = str(event.get("outcome", ""))
    status = {"passed": "ok", "skipped": "skip"}.get(outcome, "FAIL")
    points = int(event.get("points", 0))
    score = int(event.get("score", 0))
    who = f"{label} " if show else ""
    name = str(event.get("name", ""))
    line = (f"[{int(event.get('done', 0)):>4}] {who}{event.get('assignment') or '-':<18} "
            f"{name[:52]:<52} {score:>3}/{points:<3} {status}")
    reason = str(event.get("reason", ""))
    if outcome != "passed" and reason:
        line += f"  {reason[:80]}"
    return line


def label_of(state: SessionState, nodeid: str) -> tuple[str, int]:
    """(the implementation label a node id carries, its index in `--impl` order); ("", -1)
    for a test that runs once for every implementation, or in a one-implementation session."""
    if not state.multi:
        return "", -1
    for index, label in enumerate(state.impls):
        tag = f"impl={label}"
        if f"[{tag}]" in nodeid or f"[{tag}-" in nodeid or f"-{tag}]" in nodeid \
                or f"-{tag}-" in nodeid:
            return label, index
    return "", -1


def controller_state(config: pytest.Config) -> SessionState | None:
    """The session's state on the controller (None on an xdist worker: it writes no events)."""
    if hasattr(config, "workerinput"):
        return None
    return config.stash.get(STATE, None)


def close(state: SessionState) -> None:
    """Close the channel after `session_end` (the reader sees its end)."""
    if state.events is not None:
        try:
            state.events.close()
        except OSError:
            pass
        state.events = None

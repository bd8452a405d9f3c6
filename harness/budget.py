"""A loop that never ends, caught by counting, not timing: `counted(fn, max_lines)`.

A rank that loops for ever inside one case is ended only by its launch's limit, minutes later,
and takes every case of the launch with it. Rank side, `counted` runs `fn()` with the code
under test traced line by line (only its frames: the modules `harness.impl` loads under
`IMPL_PACKAGE`) and raises RuntimeError once one call into it, from outside it, has run more
than `max_lines` lines: the case fails in its own error scope, within seconds, and the same
way on an idle machine and a loaded one. Set `max_lines` far above what any correct
implementation runs (measure the solution's largest call, and leave a wide margin).

A tracer already set (selfcheck's coverage, harness/calltrace.py) still sees every call. A
loop in C code (no Python line runs) is not counted; the launch's limit still ends it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

from harness.cases import IMPL_PACKAGE

__all__ = ["LOOP_MESSAGE", "counted"]

T = TypeVar("T")
LOOP_MESSAGE = ("{fn} ran {lines} lines of the code under test in one call without returning: "
                "a loop that never ends?")


def _inside(frame: Any) -> bool:
    return frame is not None and \
        str(frame.f_globals.get("__name__", "")).startswith(IMPL_PACKAGE)


def counted(fn: Callable[[], T], max_lines: int, message: str = LOOP_MESSAGE) -> T:
    """`fn()`; RuntimeError(`message` with {fn}: the function the count ran out in, {lines}:
    `max_lines`) once one call into the code under test has run more than `max_lines` lines
    (see the module doc)."""
    previous = sys.gettrace()
    lines = [0]

    def local(frame: Any, event: Any, arg: Any) -> Any:
        if event == "line":
            lines[0] += 1
            if lines[0] > max_lines:
                raise RuntimeError(message.format(fn=frame.f_code.co_name, lines=max_lines))
        return local

    def on_call(frame: Any, event: Any, arg: Any) -> Any:
        if previous is not None:
            previous(frame, event, arg)
        if not _inside(frame):
            return None
        if not _inside(frame.f_back):
            lines[0] = 0  # a call into the code under test from outside it: a count of its own
        return local

    sys.settrace(on_call)
    try:
        return fn()
    finally:
        sys.settrace(previous)

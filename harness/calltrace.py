"""Which functions of the code under test a launch ran: the selfcheck's coverage, never a grade.

Selfcheck grades the solution and many variants of it in one pytest session (a public name
stubbed, a hand-written mutant). A variant differs from the solution in a few functions only,
so a test whose ranks never ran one of those functions under the solution behaves under the
variant exactly as under the solution, and need not run again (the grading plugin decides
that). This module measures what that decision rests on:

- rank side: `start(prefix)` records, with `sys.settrace` ('call' events only, so no per-line
  cost), the qualified name of every function whose code lives under `prefix` (the folder of
  the implementation under test) that the rank runs; `save(path)` writes them as JSON. Class
  and module bodies are not functions and are left out: importing a module runs them all.
- parent side: `enable(impl_text)` makes every later launch of that implementation trace its
  ranks; the launch reads what each rank saved and hands the union to every open `collecting()`
  block (or `None` where a rank saved nothing: then anything may have run). `Memo` and the
  plugin's fixtures pass on what their cached launches ran to the tests that reuse them.

The record is written by the code under test, so it is only ever used for our own solutions,
in selfcheck, and never awards or withholds a point (design principle 1).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from harness import rankfiles

__all__ = ["Coverage", "collecting", "disable", "enable", "report", "save", "start",
           "traced_impl"]

_CO_OPTIMIZED = 0x0001  # set on function code objects, not on class or module bodies
MAX_NAMES = 10_000
CALLS_BYTES = 4 * 1024 * 1024  # a rank's saved names, read with this cap


# -- parent side ----------------------------------------------------------------------------
_traced: str | None = None  # the --impl text whose launches are traced


def enable(impl_text: str) -> None:
    """Trace the ranks of every later launch of the implementation `impl_text`."""
    global _traced
    _traced = impl_text


def disable() -> None:
    global _traced
    _traced = None


def traced_impl() -> str | None:
    return _traced


@dataclass(eq=False)  # sinks are told apart by identity
class Coverage:
    """Qualified names of the functions of the code under test that ran, `module:qualname`
    (e.g. `ring:ring_all_reduce`, `layers:ColumnParallelLinear.forward`); `complete` is False
    when some launch could not say (a rank was killed before it saved its record)."""

    names: set[str] = field(default_factory=set)
    complete: bool = True
    launches: int = 0

    def add(self, other: Coverage) -> None:
        self.names |= other.names
        self.complete &= other.complete
        self.launches += other.launches

    def touches(self, prefixes: Iterable[str]) -> bool:
        """Whether a function named by one of `prefixes` (`name` or `module:name`; a class
        covers its methods, a function what it defines inside) ran — True when incomplete,
        and when no launch was seen: then the code under test can only have run outside the
        ranks, where nothing records it (a suite that breaks principle 1, or a fake)."""
        if not self.complete or not self.launches:
            return True
        for prefix in prefixes:
            for name in self.names:
                qualname = name.partition(":")[2] if ":" not in prefix else name
                if qualname == prefix or qualname.startswith(prefix + "."):
                    return True
        return False

    def to_plain(self) -> dict[str, Any]:
        return {"names": sorted(self.names), "complete": self.complete,
                "launches": self.launches}

    @classmethod
    def from_plain(cls, data: Any) -> Coverage:
        if not isinstance(data, dict) or not isinstance(data.get("names"), list) \
                or not isinstance(data.get("complete"), bool):
            return cls(complete=False)
        launches = data.get("launches", 1)
        return cls({str(n) for n in data["names"]}, data["complete"],
                   launches if isinstance(launches, int) else 0)


_sinks: list[Coverage] = []
_sinks_lock = threading.Lock()


@contextmanager
def collecting() -> Iterator[Coverage]:
    """What the launches inside the block ran (nested blocks each see it)."""
    sink = Coverage()
    with _sinks_lock:
        _sinks.append(sink)
    try:
        yield sink
    finally:
        with _sinks_lock:
            _sinks.remove(sink)


def report(coverage: Coverage) -> None:
    """Hand `coverage` to every open `collecting()` block."""
    with _sinks_lock:
        for sink in _sinks:
            sink.add(coverage)


def read_ranks(paths: Iterable[str]) -> Coverage:
    """The union of what the ranks of one launch saved at `paths`; incomplete where one
    saved nothing."""
    total = Coverage(launches=1)
    for path in paths:
        try:
            rank = Coverage.from_plain(json.loads(rankfiles.read_text(path, CALLS_BYTES)))
            total.names |= rank.names
            total.complete &= rank.complete
        except (OSError, ValueError):
            total.complete = False
    return total


# -- rank side ------------------------------------------------------------------------------
_seen: set[Any] = set()  # code objects already recorded
_names: set[str] = set()


def start(prefix: str) -> None:
    """Record the functions under the folder `prefix` that this process runs from now on."""
    prefixes = tuple({os.path.join(prefix, ""), os.path.join(os.path.realpath(prefix), "")})

    def trace(frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if code in _seen:
            return None
        _seen.add(code)
        if code.co_flags & _CO_OPTIMIZED and code.co_filename.startswith(prefixes) \
                and len(_names) < MAX_NAMES:
            module = os.path.splitext(os.path.basename(code.co_filename))[0]
            _names.add(f"{module}:{getattr(code, 'co_qualname', code.co_name)}")
        return None

    threading.settrace(trace)  # type: ignore[arg-type]
    sys.settrace(trace)  # type: ignore[arg-type]


def save(path: str) -> None:
    """Write what was recorded: complete, since the rank got here, where code objects know
    their qualified names (Python 3.11 on; before, a method is not told from a function)."""
    sys.settrace(None)
    threading.settrace(None)  # type: ignore[arg-type]
    complete = sys.version_info >= (3, 11) and len(_names) < MAX_NAMES
    with open(path, "w", encoding="utf-8") as f:
        json.dump(Coverage(set(_names), complete).to_plain(), f)

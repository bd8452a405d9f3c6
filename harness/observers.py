"""Who sees the arguments of every launch before its ranks start, and how a shared launch is
shown to them again.

`observe_arguments(observer)` registers `observer(fn_qualname, args, kwargs, rank_args)`;
`harness.launcher` calls `notify` for every launch (a caller's check that no expected value
travels to a rank is such an observer). A launch shared by several tests (`harness.cases.Memo`)
is made once, by whichever test asks first: `recording_arguments` keeps what its launches
showed the observers, and `replay_arguments` shows it to them again for each test that reads
it, as if that test had made it. Kept apart from the launcher, which imports `harness.cases`,
so that both can use it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

# A launch's arguments as the observers see them: (fn_qualname, args, kwargs, rank_args).
ObservedLaunch = tuple[str, tuple[Any, ...], dict[str, Any], Any]

_observers: list[Callable[[str, Any, Any, Any], None]] = []
_recorders: list[list[ObservedLaunch]] = []


def observe_arguments(observer: Callable[[str, Any, Any, Any], None]) -> None:
    """Call `observer(fn_qualname, args, kwargs, rank_args)` for every launch from now on,
    before the ranks start (the caller's check that no expected value travels to a rank)."""
    _observers.append(observer)


def notify(observed: ObservedLaunch) -> None:
    """Show one launch's arguments to the observers and to every recording open now."""
    for recorder in _recorders:
        recorder.append(observed)
    for observer in _observers:
        observer(*observed)


@contextmanager
def recording_arguments() -> Iterator[list[ObservedLaunch]]:
    """Record what every launch made meanwhile (in this process; nested recordings each get
    it too) showed the observers, for `replay_arguments`."""
    recorded: list[ObservedLaunch] = []
    _recorders.append(recorded)
    try:
        yield recorded
    finally:
        _recorders.remove(recorded)


def replay_arguments(recorded: Sequence[ObservedLaunch]) -> None:
    """Show the observers the recorded launches again (see the module docstring)."""
    for observed in recorded:
        notify(observed)

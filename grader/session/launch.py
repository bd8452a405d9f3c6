"""The fixtures graded tests use: `impl` (the --impl under test) and `launch` (the harness's
launch, bound to it and timed for the session's breakdown of where its time goes).

Loaded by `grader/session/plugin.py` (`pytest_plugins`).
"""

from __future__ import annotations

import functools
import time
from typing import Any

import pytest

from grader.session.state import LAUNCH_CLOCK, STATE
from harness.impl import ImplSpec


@pytest.fixture(scope="session")
def impl(pytestconfig: pytest.Config) -> ImplSpec:
    """The --impl of this run, resolved (`harness.impl.ImplSpec`: kind, root, text)."""
    return pytestconfig.stash[STATE].impl


@pytest.fixture(scope="session")
def launch(impl: ImplSpec):
    """`harness.launch` with `impl` bound to this run's --impl (timed, for the session's
    breakdown of where its time goes)."""
    from harness import forkserver
    from harness.launcher import launch as _launch

    if not forkserver.running():
        # Start the forkserver with a launch that does nothing (the rank function is the
        # builtin `id`, called on ctx), so the breakdown can tell its cost from the tests'.
        start = time.perf_counter()
        _launch(id, 1, impl=impl, timeout=120.0)
        LAUNCH_CLOCK["forkserver_s"] = time.perf_counter() - start

    from grader.leakcheck import refuse_answer_keys

    @functools.wraps(_launch)
    def timed_launch(*args: Any, **kwargs: Any) -> Any:
        refuse_answer_keys(kwargs.get("args", ()),
                           kwargs.get("kwargs") or {}, kwargs.get("rank_args"))
        start = time.perf_counter()
        try:
            return _launch(*args, impl=impl, **kwargs)
        finally:
            LAUNCH_CLOCK["spent"] = LAUNCH_CLOCK.get("spent", 0.0) + time.perf_counter() - start
            LAUNCH_CLOCK["launches"] = LAUNCH_CLOCK.get("launches", 0.0) + 1

    return timed_launch

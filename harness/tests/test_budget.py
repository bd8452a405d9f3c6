"""harness.budget.counted: a loop of the code under test that never ends fails by count."""

from __future__ import annotations

import sys
import types

import pytest

from harness.budget import counted
from harness.cases import IMPL_PACKAGE

SOURCE = '''
def spins(n):
    i = 0
    while i < n:
        pass
    return i

def loops(n):
    total = 0
    for i in range(n):
        total += i
    return total
'''


@pytest.fixture
def impl():
    module = types.ModuleType(IMPL_PACKAGE + "budget_probe")
    exec(compile(SOURCE, "probe.py", "exec"), module.__dict__)  # noqa: S102 - our own source
    return module


def test_a_loop_that_never_ends_raises_and_a_finite_one_returns(impl):
    with pytest.raises(RuntimeError, match=r"^spins ran 10000 lines of the code under test"):
        counted(lambda: impl.spins(1), 10_000)
    # each call from outside the code under test has a count of its own
    assert counted(lambda: [impl.loops(2_000) for _ in range(10)], 10_000)[0] == 1999000
    assert sys.gettrace() is None


def test_a_tracer_already_set_still_sees_the_calls(impl):
    seen = []

    def outer(frame, event, arg):
        seen.append(frame.f_code.co_name)

    sys.settrace(outer)
    try:
        counted(lambda: impl.loops(3), 100)
    finally:
        sys.settrace(None)
    assert "loops" in seen

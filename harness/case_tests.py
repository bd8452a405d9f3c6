"""Test side of "one launch, many cases": a module's shared launch and its one-line tests.

`harness.cases` runs many cases in one launch, each in its own error scope. A test module
whose tests each judge some of those cases then needs the same two things every time: a
module-scoped fixture that makes the launch once, and tests that judge chosen cases. This
module makes both, so a suite never writes them again:

    SCALE = CaseTests(run=lambda launch: run(launch, CASES),
                      judge=lambda results, key, **kw: check(CASES[key], results[key], **kw),
                      exercises=lambda keys: ["scale"])
    case_runs = SCALE.fixture                    # the launch, once per module
    test_scale_by_two = SCALE.test(2, "by_two")  # worth 2 points: judges case "by_two"

- `run(launch)` makes the launch (with the session's `launch` fixture) and returns whatever
  the judge reads: the fixture's value, computed once per module and implementation. For a
  launch of several ranks, make it with `harness.cases.launch_cases(lambda env: launch(...,
  env=env), names)`, so that a case that hangs or ends the launch costs only itself.
- `judge(value, key, **kw)` raises AssertionError (any `harness` LaunchError is one) unless
  case `key` is right; `test(points, *keys, **kw)` passes `kw` on.
- `exercises(keys)` names the public functions the cases of `keys` call: the test's
  `exercises` marker, so partial credit counts exactly them.

The fixture is named `case_runs` (`FIXTURE`): bind it to that module-level name. Each test
is collected under the module-level name it is assigned to, carries `points(n)` and
`exercises(...)`, and asks only for that fixture. `where(rank, world_size)`, the
"[rank r of n]" prefix of a message, is `harness.cases.where`, re-exported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

import pytest

from harness.cases import where

__all__ = ["FIXTURE", "CaseTests", "where"]

FIXTURE = "case_runs"
R = TypeVar("R")


class CaseTests(Generic[R]):
    """A module's launch fixture (`fixture`) and its one-line graded tests (`test`); see the
    module doc."""

    def __init__(self, run: Callable[[Any], R], judge: Callable[..., None],
                 exercises: Callable[[Sequence[str]], Iterable[str]]) -> None:
        self.judge = judge
        self.exercises = exercises

        @pytest.fixture(scope="module", name=FIXTURE)
        def case_runs(launch: Any) -> R:
            return run(launch)

        self.fixture = case_runs

    def test(self, points: int, *keys: str, **judge_kw: Any) -> Callable[[R], None]:
        """A test worth `points` that passes when `judge` passes every case of `keys`."""
        judge, chosen = self.judge, tuple(keys)
        names = sorted(set(self.exercises(chosen)))

        @pytest.mark.exercises(*names)
        @pytest.mark.points(points)
        def test(case_runs: R) -> None:
            for key in chosen:
                judge(case_runs, key, **judge_kw)

        return test

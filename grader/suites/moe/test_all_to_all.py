"""all_to_all_tokens on 2 and 4 ranks: rows to the right ranks in order, the gradient back the
way the rows came, one all_to_all_single each way on the wire (README §5).

The 4-rank case `equal_totals` sends as many rows as each rank receives with splits that are
not symmetric: a backward that does not swap the splits runs without error there and puts
gradients on the wrong rows, so that case is judged first.
"""

from __future__ import annotations

import pytest

from grader.compare import assert_close
from grader.suites.moe._cases import cases_for, run, values, wire_windows
from grader.suites.moe._ref import describe
from harness.cases import where

pytestmark = pytest.mark.exercises("all_to_all_tokens")

CASES = [pytest.param(4, "equal_totals", id="world_size=4-equal_totals"),
         pytest.param(4, "uneven_with_empty_pairs", id="world_size=4-uneven_with_empty_pairs"),
         pytest.param(2, "uneven", id="world_size=2-uneven"),
         pytest.param(2, "one_rank_sends_nothing", id="world_size=2-one_rank_sends_nothing")]


def _expected(world: int, name: str) -> dict:
    return cases_for(world)[f"a2a {name}"]["expected"]


@pytest.mark.points(1)
@pytest.mark.parametrize("world,name", CASES)
def test_forward(launch, impl, world, name):
    result = run(launch, impl, world)
    expected = _expected(world, name)
    for r, v in enumerate(values(result, f"a2a {name}")):
        assert_close(v["out"], expected["out"][r], what=f"{where(r, world)} all_to_all_tokens "
                     f"output", hint_first=True,
                     hint="rows from rank 0 first, then rank 1, ...; each block in the order "
                          "its sender had them")


@pytest.mark.points(1)
@pytest.mark.parametrize("world,name", CASES)
def test_backward(launch, impl, world, name):
    result = run(launch, impl, world)
    expected = _expected(world, name)
    for r, v in enumerate(values(result, f"a2a {name}")):
        assert_close(v["x_grad"], expected["x_grad"][r], what=f"{where(r, world)} "
                     f"all_to_all_tokens input gradient", hint_first=True,
                     hint="backward is the reverse all-to-all: swap the splits (send by "
                          "recv_splits, receive by send_splits)")


@pytest.mark.points(1)
@pytest.mark.parametrize("world,name", CASES[:1] + CASES[2:3])
def test_one_call_each_way(launch, impl, world, name):
    result = run(launch, impl, world)
    values(result, f"a2a {name}")  # the case itself must have passed
    for r in range(world):
        win = wire_windows(result, r)  # what the sidecars carried
        for step in ("forward", "backward"):
            calls = [c for c in win[f"a2a {name} {step}"] if c.op != "mark"]
            ok = len(calls) == 1 and calls[0].op == "all_to_all_single"
            assert ok, (f"{where(r, world)} all_to_all_tokens {step} made {describe(calls)}; "
                        f"the budget is exactly one all_to_all_single")

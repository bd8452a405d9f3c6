"""partition: the optimal bottleneck, the documented tie rule, corner cases and bad arguments.

All calls run in one single-rank launch. The parent's reference tries every cut (at most 12
layers, so every combination is cheap) and keeps the best bottleneck, ties broken by the
longest earliest stages. Costs are integers, so every comparison is exact.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import strategies as st

from grader.seeds import drawn_integers, hypothesis_examples, seeded_generator
from grader.suites.pipeline._ranks import PureCall, rank_pure
from grader.suites.pipeline._ref import check_partition
from harness.cases import Memo, case_value

pytestmark = pytest.mark.exercises("partition")
MEMO = Memo()
BAD = [("stages=0", [[1, 2, 3], 0]), ("stages>layers", [[1, 2], 3]),
       ("negative-cost", [[1, -2, 3], 2])]


def _seeded_cases() -> list[tuple[list[int], int]]:
    """40 uniform draws: 2 to 12 layers of cost 1 to 19, 1 to n stages."""
    gen = seeded_generator(77)
    cases = []
    for _ in range(40):
        n = int(torch.randint(2, 13, (1,), generator=gen))
        p = int(torch.randint(1, n + 1, (1,), generator=gen))
        cases.append((torch.randint(1, 20, (n,), generator=gen).tolist(), p))
    return cases


def _hypothesis_cases(count: int = 40) -> list[tuple[list[int], int]]:
    """`count` (costs, num_stages) drawn with hypothesis in the parent, the same on every run:
    2 to 12 layers of cost 0 to 19 (zeros and equal costs make ties), 1 to n stages; hypothesis
    favours the small and degenerate ones the uniform draws rarely give. Hypothesis only
    generates; the calls go into the one launch and are judged afterwards (no shrinking)."""
    raw = drawn_integers()
    return [([v % 20 for v in values], 1 + stages % len(values)) for values, stages in
            hypothesis_examples(st.tuples(st.lists(raw, min_size=2, max_size=12), raw),
                                count, 77)]


OPTIMUM = [([4, 1, 1, 1, 1, 4], 3), ([1, 2, 3, 4, 5, 6, 7, 8], 3), ([10, 1, 1, 1, 1, 1], 2),
           ([1, 1, 1, 1, 1, 10], 2), ([3, 3, 3, 3], 4), ([5, 1, 5, 1, 5, 1, 5], 4),
           ([2, 9, 2, 2, 2, 2, 9, 2], 3), ([7], 1), ([1, 2, 3], 1)]
TIES = [([1, 1, 1, 1], 3), ([2, 2, 2, 2, 2, 2], 4), ([1, 1, 1, 1, 1], 2), ([1, 3, 1, 1, 1, 3], 3),
        ([0, 0, 0, 0], 2), ([5, 0, 0, 5], 2), ([1, 1, 1], 3),
        ([1, 4, 1, 3, 1, 10, 4], 5), ([2, 9, 6, 4, 10, 5, 1], 6), ([10, 1, 0, 4, 7, 12, 12, 1], 7),
        ([4, 0, 8, 0, 3, 5, 1, 3], 6)]


def _cases() -> dict[str, tuple[list[int], int]]:
    named = {}
    for group, items in (("optimum", OPTIMUM), ("ties", TIES),
                         ("random", _seeded_cases() + _hypothesis_cases())):
        for i, (costs, p) in enumerate(items):
            named[f"{group}-{i}"] = (costs, p)
    return named


def _outcomes(launch, impl) -> tuple[dict, dict]:
    cases = _cases()
    calls: list[PureCall] = [(name, "partition", [list(costs), p], {}, False)
             for name, (costs, p) in cases.items()]
    calls += [(name, "partition", args, {}, True) for name, args in BAD]
    return cases, MEMO.get((impl, "partition"), lambda: launch(rank_pure, 1, args=(calls,),
                                                       timeout=60.0).values[0])


def _check(launch, impl, group: str) -> None:
    cases, got = _outcomes(launch, impl)
    for name, (costs, p) in cases.items():
        if name.startswith(group + "-"):
            check_partition(costs, p, case_value(got.get(name), f"partition ({name})"))


@pytest.mark.points(5)
def test_optimal_bottleneck(launch, impl):
    _check(launch, impl, "optimum")


@pytest.mark.points(3)
def test_tie_rule_longest_early_stages(launch, impl):
    _check(launch, impl, "ties")


@pytest.mark.points(2)
def test_random_costs_seeded_and_drawn_by_hypothesis(launch, impl):
    _check(launch, impl, "random")


@pytest.mark.points(2)
def test_bad_arguments(launch, impl):
    _, got = _outcomes(launch, impl)
    for name, args in BAD:
        raised = case_value(got.get(name), f"partition ({name})")
        assert raised == "ValueError", (
            f"partition({args[0]}, {args[1]}) returned instead of raising ValueError ({name})")

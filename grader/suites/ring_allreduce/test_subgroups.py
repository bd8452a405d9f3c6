"""Subgroups of 4 ranks (hidden suite): positions are group ranks, peers are global ranks.

Groups (0, 1, 3), (1, 3) and (0, 2); the last two also run at the same time, each on its own
members, to show that traffic stays inside a group.
"""

from __future__ import annotations

import pytest
import torch

from grader.seeds import seeded_generator
from grader.suites.ring_allreduce._cases import (
    Case,
    gather_case,
    launch_memo,
    launch_sweep,
    reduction_case,
)
from grader.suites.ring_allreduce._ref_checks import check_all, check_ring_traffic

WORLD_SIZE = 4
GROUPS = [(0, 1, 3), (1, 3), (0, 2)]


def build_cases() -> list[Case]:
    gen = seeded_generator(4000)
    n = WORLD_SIZE
    cases = []
    for group in GROUPS[:2]:
        on = f"on group {list(group)}"
        cases += [
            reduction_case(gen, f"ring_reduce_scatter(op='sum') {on}", "reduce_scatter", "sum",
                           (11,), torch.float32, n, group=group, kind="group"),
            reduction_case(gen, f"ring_all_reduce(op='sum') {on}", "all_reduce", "sum", (10,),
                           torch.float32, n, group=group, kind="group"),
            reduction_case(gen, f"ring_all_reduce(op='avg') {on}", "all_reduce", "avg", (3, 3),
                           torch.float64, n, group=group, kind="group"),
            reduction_case(gen, f"ring_all_reduce(op='max') {on}", "all_reduce", "max", (7,),
                           torch.int64, n, group=group, kind="group"),
            gather_case(gen, f"ring_all_gather {on}", (9,), torch.float32, n, group=group,
                        kind="group"),
        ]
    # (0, 2) and (1, 3) are disjoint: consecutive cases for them run concurrently.
    for op in ("sum", "product"):
        for group in ((0, 2), (1, 3)):
            cases.append(reduction_case(
                gen, f"ring_all_reduce(op='{op}') on group {list(group)} while the other pair "
                     "runs its own", "all_reduce", op, (13,), torch.int32, n, group=group,
                kind="concurrent", meet=group != (0, 2)))
    return cases


@pytest.fixture(scope="module")
def subgroups(launch):
    memo = launch_memo()
    cases = build_cases()

    def run():
        return cases, memo.get("subgroups", lambda: launch_sweep(
            launch, cases, WORLD_SIZE, groups=GROUPS))

    return run


@pytest.mark.exercises("ring_all_reduce", "ring_reduce_scatter", "ring_all_gather")
@pytest.mark.points(4)
def test_subgroup_values(subgroups):
    cases, result = subgroups()
    check_all(cases, result.values, WORLD_SIZE, "group")


@pytest.mark.exercises("ring_all_reduce")
@pytest.mark.points(2)
def test_disjoint_subgroups_concurrently(subgroups):
    cases, result = subgroups()
    check_all(cases, result.values, WORLD_SIZE, "concurrent")


@pytest.mark.exercises("ring_all_reduce", "ring_reduce_scatter", "ring_all_gather")
@pytest.mark.points(2)
def test_subgroup_traffic_stays_in_the_group_ring(subgroups):
    cases, result = subgroups()
    check_ring_traffic(cases, result, WORLD_SIZE)

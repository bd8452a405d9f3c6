"""ring_shift (hidden suite): values at world sizes 1-6, an order of blocking calls that cannot
deadlock, a large message on an odd world, and subgroups.

Only `dist.send` and `dist.recv` are allowed here. The order check replays each rank's calls
as if every send waited for its receiver (NCCL does; gloo does for large messages), so code
that passes only because a send returned early still fails.
"""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close
from grader.seeds import seeded_generator
from grader.suites.ring_allreduce._cases import (
    HANG_TIMEOUT_S,
    SHIFT_ONLY,
    SUBGROUP_HINTS,
    TRANSPORT,
    Case,
    FailureHint,
    explained_launch,
    launch_memo,
    launch_sweep,
    reduction_case,
)
from grader.suites.ring_allreduce._ranks import shift_large
from grader.suites.ring_allreduce._ref import blocking_deadlock
from grader.suites.ring_allreduce._ref_checks import case_calls, case_results, check_all

WORLD_SIZES = (1, 2, 3, 4, 5, 6)
SUBGROUPS = ((0, 1, 3), (1, 3), (0, 2))
LARGE_SHIFT_HANG = FailureHint(match="did not finish within", message=(
    f"ring_shift of a 4 MiB tensor on 5 ranks did not finish within {HANG_TIMEOUT_S:g} s: it "
    "deadlocks when sends wait for their receiver; let even positions send first and odd ones "
    "receive first (README §3)"))


def build_cases(world_size: int, groups: tuple[tuple[int, ...], ...] = ((),)) -> list[Case]:
    gen = seeded_generator(2000 + world_size)
    cases = []
    for group in groups:
        members = f" on group {list(group)}" if group else ""
        for label, shape, dtype, layout in (
                ("a 1-d float32 tensor", (world_size + 3,), torch.float32, "contiguous"),
                ("a 3-d int64 tensor", (2, 3, 4), torch.int64, "contiguous"),
                ("a transposed float64 tensor", (4, 3), torch.float64, "transposed"),
                ("a bfloat16 tensor", (5,), torch.bfloat16, "contiguous"),
                ("an empty tensor", (0,), torch.float32, "contiguous")):
            cases.append(reduction_case(gen, f"ring_shift of {label}{members}", "shift", "max",
                                        shape, dtype, world_size, group=group or None,
                                        layout=layout, kind="shift"))
    return cases


@pytest.fixture(scope="module")
def shifts(launch):
    """key -> (cases, LaunchResult): key is a world size, or "subgroups" (4 ranks)."""
    memo, subgroup_memo = launch_memo(), launch_memo(SUBGROUP_HINTS)

    def run(key):
        world_size, groups = (4, SUBGROUPS) if key == "subgroups" else (key, ((),))
        cases = build_cases(world_size, groups)
        group_list = [g for g in groups if g]
        result = (subgroup_memo if key == "subgroups" else memo).get(key, lambda: launch_sweep(
            launch, cases, world_size, groups=group_list, forbid=SHIFT_ONLY,
            timeout=HANG_TIMEOUT_S))
        return cases, result

    return run


@pytest.mark.exercises("ring_shift")
@pytest.mark.points(1)
@pytest.mark.parametrize("world_size", WORLD_SIZES, ids="world_size={}".format)
def test_ring_shift_values(shifts, world_size):
    cases, result = shifts(world_size)
    check_all(cases, result.values, world_size, "shift")


@pytest.mark.exercises("ring_shift")
@pytest.mark.points(4)
def test_ring_shift_order_cannot_deadlock(shifts):
    """One send to the successor and one receive from the predecessor, in a safe order."""
    for world_size in WORLD_SIZES[1:]:
        cases, result = shifts(world_size)
        case_results(cases, result.values, world_size)  # a call that raised made no calls
        for case, records in zip(cases, case_calls(result, len(cases)), strict=True):
            calls = {}
            for rank in range(world_size):
                made = [(r.op, r.peer) for r in records[rank]]
                wanted = [("recv", (rank - 1) % world_size), ("send", (rank + 1) % world_size)]
                if sorted(made, key=str) != sorted(wanted, key=str):
                    raise AssertionError(
                        f"[rank {rank} of {world_size}] {case.label}: made {made}; ring_shift "
                        f"makes one send to rank {wanted[1][1]} and one recv from rank "
                        f"{wanted[0][1]}")
                calls[rank] = made
            problem = blocking_deadlock(calls)
            if problem:
                raise AssertionError(
                    f"ring_shift on {world_size} ranks {problem}; let even positions send "
                    "first and odd ones receive first (README §3)")


@pytest.mark.exercises("ring_shift")
@pytest.mark.points(3)
def test_ring_shift_large_message_odd_world(launch):
    """5 ranks, 4 MiB each: far more than any socket buffer, so every send really blocks."""
    world_size, numel = 5, 1 << 20
    result = explained_launch(lambda: launch(shift_large, world_size, args=(numel,),
                                             forbid=SHIFT_ONLY, transport=TRANSPORT,
                                             timeout=HANG_TIMEOUT_S),
                              (LARGE_SHIFT_HANG,))
    for rank, got in enumerate(result.values):
        source = (rank - 1) % world_size
        expected = torch.arange(source * numel, (source + 1) * numel, dtype=torch.float32)
        assert_close(got, expected, what=f"[rank {rank} of {world_size}] ring_shift of a "
                     f"large tensor", hint=f"rank {rank} must receive rank {source}'s tensor")


@pytest.mark.exercises("ring_shift")
@pytest.mark.points(2)
def test_ring_shift_subgroups(shifts):
    """Groups (0, 1, 3), (1, 3) and (0, 2) of 4 ranks: neighbours are group neighbours."""
    cases, result = shifts("subgroups")
    check_all(cases, result.values, 4, "shift", SUBGROUP_HINTS)
    for case, records in zip(cases, case_calls(result, len(cases)), strict=True):
        members = case.members(4)
        for position, rank in enumerate(members):
            peers = {r.op: r.peer for r in records[rank]}
            successor = members[(position + 1) % len(members)]
            if peers.get("send") != successor:
                raise AssertionError(
                    f"[rank {rank} of 4] {case.label}: sent to rank {peers.get('send')}, "
                    f"expected its group successor, rank {successor}; map group positions "
                    "to global ranks with dist.get_process_group_ranks(group)")

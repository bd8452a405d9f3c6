"""Ulysses (README §6): values against full attention (2 and 4 ranks, causal and not, dim_v !=
dim); the bytes each rank sent to the other ranks, counted by the sidecars outside the rank
(`result.wire`); ValueError when the heads do not split over the ranks.
"""

from __future__ import annotations

import pytest

from grader.suites.context_parallel._cases import LAUNCHES, expected, run, values
from grader.suites.context_parallel._ref import check, wire_window
from harness.cases import where

pytestmark = pytest.mark.exercises("ulysses_attention")

LAYOUT_HINT = ("the all-to-all splits the heads (dim 1) and gathers the sequence (dim 2) in "
               "rank order; the way back does the reverse")
SLACK_BYTES = 64 * 1024  # files: rendezvous, the result hand-off
SLACK_FRACTION = 0.10
ALL_TO_ALLS = ("alltoall", "alltoall_base")  # what the sidecars call all_to_all(_single)


@pytest.mark.parametrize(("which", "name"), [
    pytest.param("ulysses2", "ulysses", id="world_size=2", marks=pytest.mark.points(2)),
    pytest.param("ulysses2", "ulysses causal", id="world_size=2-causal",
                 marks=pytest.mark.points(2)),
    pytest.param("ulysses4", "ulysses causal large", id="world_size=4-causal-seq=512",
                 marks=pytest.mark.points(1)),
])
def test_ulysses_values(launch, impl, which, name):
    world = LAUNCHES[which][0]
    got = values(run(launch, impl, which), name)
    want = expected(which, name)
    for r in range(world):
        check(got[r]["out"], want["out"][r], f"{where(r, world)} ulysses_attention ({name})",
              tol=want["tol"], hint=LAYOUT_HINT)


@pytest.mark.points(1)
@pytest.mark.parametrize(("which", "name"), [
    pytest.param("ulysses2", "heads=3", id="world_size=2-heads=3"),
    pytest.param("ulysses4", "heads=6", id="world_size=4-heads=6"),
])
def test_ulysses_rejects_heads_not_divisible(launch, impl, which, name):
    got = values(run(launch, impl, which), name)
    assert got[0] == "ValueError", (
        f"ulysses_attention with {name} on {LAUNCHES[which][0]} ranks: {got[0]}; raise "
        f"ValueError (before any communication) when heads is not divisible by N")


def sent_to_others(records: list, rank: int) -> int:
    """Bytes carried from `rank` to other ranks: each all-to-all's slots but the rank's own,
    and whatever any other operation handed over."""
    total = 0
    for w in records:
        if w.kind in ALL_TO_ALLS:
            own = w.group_ranks.index(rank) if rank in w.group_ranks else -1
            total += sum(n for i, n in enumerate(w.peer_bytes) if i != own)
        else:
            total += w.bytes
    return total


@pytest.mark.points(1)
def test_ulysses_bytes_on_the_wire(launch, impl):
    which, name = "ulysses4", "ulysses causal large"
    result = run(launch, impl, which)
    world = LAUNCHES[which][0]
    values(result, name)
    want = expected(which, name)["wire_bytes"]
    low, high = want * (1 - SLACK_FRACTION), want * (1 + SLACK_FRACTION)
    for r in range(world):
        carried = wire_window(result, r, name)
        sent = sent_to_others(carried, r)
        calls = [w.kind for w in carried]
        assert low <= sent <= high and all(k in ALL_TO_ALLS for k in calls), (
            f"{where(r, world)} ulysses_attention sent {sent / 2**10:.0f} KiB to the other "
            f"ranks; four all-to-alls (q, k, v, out) each sending (N-1)/N of the tensor make "
            f"{want / 2**10:.0f} KiB: use all_to_all only, each tensor once "
            f"(operations carried: {calls[:8]})")
        unlogged = result.unlogged_bytes(r)
        assert unlogged is None or unlogged <= SLACK_BYTES + SLACK_FRACTION * want, (
            f"{where(r, world)} ulysses_attention wrote {unlogged / 2**10:.0f} KiB to files: "
            f"data must move between ranks with all_to_all, never through the disk")

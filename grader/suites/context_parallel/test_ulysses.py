"""Ulysses (README §6): values against full attention (2 and 4 ranks, causal and not, dim_v !=
dim); the bytes each rank wrote to the network, counted by the kernel outside the rank (the
sidecar does not carry all-to-all); ValueError when the heads do not split over the ranks.
"""

from __future__ import annotations

import pytest

from grader.suites.context_parallel._common import check, values, where
from grader.suites.context_parallel._launches import LAUNCHES, expected, run

pytestmark = pytest.mark.exercises("ulysses_attention")

LAYOUT_HINT = ("the all-to-all splits the heads (dim 1) and gathers the sequence (dim 2) in "
               "rank order; the way back does the reverse")
SLACK_BYTES = 64 * 1024  # rendezvous, the case meetings, the result hand-off
SLACK_FRACTION = 0.10


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


@pytest.mark.points(1)
def test_ulysses_bytes_on_the_wire(launch, impl):
    which, name = "ulysses4", "ulysses causal large"
    result = run(launch, impl, which)
    world = LAUNCHES[which][0]
    values(result, name)
    if any(count is None for count in result.written_bytes):
        pytest.skip("this machine has no /proc/<pid>/io: transport bytes cannot be counted")
    want = expected(which, name)["wire_bytes"]
    low, high = want * (1 - SLACK_FRACTION), want * (1 + SLACK_FRACTION) + SLACK_BYTES
    for r in range(world):
        written = result.written_bytes[r]
        calls = [c.op for c in result.comm[r] if c.op not in ("mark",)]
        assert low <= written <= high, (
            f"{where(r, world)} ulysses_attention wrote {written / 2**10:.0f} KiB to the network; "
            f"four all-to-alls (q, k, v, out) each sending (N-1)/N of the tensor make "
            f"{want / 2**10:.0f} KiB: use all_to_all only, each tensor once "
            f"(calls seen in the rank: {calls[:8]})")

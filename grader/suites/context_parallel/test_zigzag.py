"""The zigzag split and its inverse (README §5): the positions of each rank, equal causal work
on every rank (counted in the parent from the returned positions), the round trip, bad input;
fixed sizes and sizes drawn by hypothesis in the parent (`_cases.zigzag_calls`).
Read from rank 0 of the 2-rank launch.
"""

from __future__ import annotations

import pytest
import torch

from grader.suites.context_parallel._cases import expected, run, values
from grader.suites.context_parallel._cases_units import ZIGZAG_INVALID, zigzag_calls
from grader.suites.context_parallel._ref import check

LAUNCH = "ring2"
ORDER_HINT = ("rank r holds chunk r then chunk 2N-1-r of 2N equal chunks, each in ascending "
              "order")


def _expected_split(seq_len: int, world: int) -> list[torch.Tensor]:
    chunks = torch.arange(seq_len).chunk(2 * world)
    return [torch.cat([chunks[r], chunks[2 * world - 1 - r]]) for r in range(world)]


def _splits(launch, impl) -> list:
    return values(run(launch, impl, LAUNCH), "zigzag")[0]


@pytest.mark.exercises("zigzag_split")
@pytest.mark.points(2)
def test_zigzag_positions(launch, impl):
    for (seq_len, world), got in zip(zigzag_calls(), _splits(launch, impl)):
        what = f"zigzag_split({seq_len}, {world})"
        want = _expected_split(seq_len, world)
        assert isinstance(got, list) and len(got) == world, (
            f"{what}: expected a list of {world} tensors, got {type(got).__name__}")
        for r, (g, w) in enumerate(zip(got, want)):
            assert isinstance(g, torch.Tensor) and g.dtype == torch.int64, (
                f"{what}[{r}]: expected an int64 tensor, got {getattr(g, 'dtype', g)}")
            assert torch.equal(g, w), (
                f"{what}[{r}]: {ORDER_HINT}; got {g.tolist()}, expected {w.tolist()}")


@pytest.mark.exercises("zigzag_split")
@pytest.mark.points(2)
def test_zigzag_balances_causal_work(launch, impl):
    for (seq_len, world), got in zip(zigzag_calls(), _splits(launch, impl)):
        what = f"zigzag_split({seq_len}, {world})"
        flat = torch.cat([torch.as_tensor(g).reshape(-1) for g in got])
        assert sorted(flat.tolist()) == list(range(seq_len)), (
            f"{what}: every position must be held by exactly one rank")
        # A query at position p sees p + 1 keys under a causal mask.
        work = [int((torch.as_tensor(g) + 1).sum()) for g in got]
        assert len(set(work)) == 1, (
            f"{what}: unmasked score entries per rank are {work}, must be equal: "
            f"{ORDER_HINT}")


@pytest.mark.exercises("zigzag_unsplit")
@pytest.mark.points(2)
def test_zigzag_unsplit_round_trip(launch, impl):
    got = values(run(launch, impl, LAUNCH), "unsplit")[0]
    for i, (value, want) in enumerate(zip(got, expected(LAUNCH, "unsplit")["x"])):
        check(value, want, f"zigzag_unsplit (case {i}: {list(want.shape)})",
              hint="shard r is chunk r then chunk 2N-1-r; put each chunk back at its position")


@pytest.mark.exercises("zigzag_split")
@pytest.mark.points(1)
def test_zigzag_rejects_bad_sizes(launch, impl):
    got = values(run(launch, impl, LAUNCH), "zigzag invalid")[0]
    for seq_len, world in ZIGZAG_INVALID:
        verdict = got[f"{seq_len},{world}"]
        assert verdict == "ValueError", (
            f"zigzag_split({seq_len}, {world}): {verdict}; raise ValueError unless seq_len is "
            f"a multiple of 2*world_size and world_size >= 1")


@pytest.mark.exercises("zigzag_unsplit")
@pytest.mark.points(1)
def test_zigzag_unsplit_default_dim(launch, impl):
    got = values(run(launch, impl, LAUNCH), "unsplit default")[0]
    check(got, expected(LAUNCH, "unsplit default")["x"], "zigzag_unsplit(shards)",
          hint="dim defaults to 0")

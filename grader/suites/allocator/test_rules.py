"""round_size, allocation_size and should_split on boundary and drawn inputs (one launch),
against the README §3 formulas computed here."""

from __future__ import annotations

import random

import pytest

from grader.seeds import shifted
from grader.suites.allocator._ranks import rank_size_rules
from harness.cases import case_value

MIB = 1 << 20
EDGES = [1, 2, 511, 512, 513, 1023, 1024, 1025, MIB - 1, MIB, MIB + 1, 2 * MIB - 1, 2 * MIB,
         10 * MIB - 513, 10 * MIB - 512, 10 * MIB - 1, 10 * MIB, 10 * MIB + 1, 20 * MIB + 1,
         21 * MIB, 100 * MIB + 3]
BAD = [0, -1, -512]


def sizes() -> list[int]:
    rng = random.Random(shifted(42))
    drawn = [rng.randrange(1, 64 * MIB) for _ in range(60)] + [512 * rng.randrange(1, 2**16)
                                                               for _ in range(30)]
    return EDGES + drawn + BAD


def splits() -> list[tuple[int, int, bool]]:
    rng = random.Random(shifted(43))
    cases = [(2 * MIB, 2 * MIB - 512, True), (2 * MIB, 2 * MIB, True), (1024, 512, True),
             (20 * MIB, 19 * MIB, False), (20 * MIB, 19 * MIB - 512, False),
             (20 * MIB, 19 * MIB + 512, False), (12 * MIB, 12 * MIB, False),
             (2 * MIB, MIB, True)]
    for _ in range(40):
        rounded = 512 * rng.randrange(1, 40960)
        cases.append((rounded + 512 * rng.choice((0, 1, 2, 2047, 2048, 2049, 4000)), rounded,
                      rounded <= MIB))
    return cases


def expected_round(size: int) -> int | str:
    return "ValueError" if size < 1 else -(-size // 512) * 512


def expected_allocation(rounded: int) -> int:
    if rounded <= MIB:
        return 2 * MIB
    return 20 * MIB if rounded < 10 * MIB else -(-rounded // (2 * MIB)) * (2 * MIB)


def expected_split(block: int, rounded: int, small: bool) -> bool:
    return block - rounded >= 512 if small else block - rounded > MIB


SIZES, SPLITS = sizes(), splits()


@pytest.fixture(scope="module")
def rules(launch):
    return launch(rank_size_rules, world_size=1, args=(SIZES, SPLITS), timeout=60).values[0]


@pytest.mark.exercises("round_size")
@pytest.mark.points(3)
def test_round_size_to_multiples_of_512_and_rejects_below_one(rules):
    got = case_value(rules["round_size"], "round_size")
    for size, value in zip(SIZES, got, strict=True):
        want = expected_round(size)
        assert value == want, (f"round_size({size}) is {value}, expected {want}: round up to a "
                               f"multiple of 512 (ValueError below 1)")


@pytest.mark.exercises("allocation_size")
@pytest.mark.points(3)
def test_allocation_size_per_pool(rules):
    got = case_value(rules["allocation_size"], "allocation_size")
    inputs = [s for s in SIZES if s >= 1 and s % 512 == 0]
    for rounded, value in zip(inputs, got, strict=True):
        want = expected_allocation(rounded)
        assert value == want, (
            f"allocation_size({rounded}) is {value}, expected {want}: 2 MiB up to 1 MiB, 20 MiB "
            f"below 10 MiB, else round up to a multiple of 2 MiB")


@pytest.mark.exercises("should_split")
@pytest.mark.points(2)
def test_should_split_thresholds(rules):
    got = case_value(rules["should_split"], "should_split")
    for (block, rounded, small), value in zip(SPLITS, got, strict=True):
        want = expected_split(block, rounded, small)
        assert value is want, (
            f"should_split({block}, {rounded}, is_small_pool={small}) is {value}: split only "
            f"when the remainder is >= 512 (small pool) or > 1 MiB (large pool)")

"""Buckets: `pick_bucket` edge cases, the default bucket list, and bucket arguments checked.

One rank answers every question (nothing here captures or decodes), so this file is cheap and
runs first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from grader.suites.cuda_graph_decode._cases import answer

PICK_CASES = {
    "exact": (4, [1, 2, 4, 8]),
    "between": (3, [1, 2, 4, 8]),
    "smallest": (1, [1, 2, 4, 8]),
    "largest": (8, [1, 2, 4, 8]),
    "above": (9, [1, 2, 4, 8]),
    "far above": (1000, [1, 2, 4, 8, 16, 32]),
    "unsorted": (5, [16, 2, 8, 1, 4]),
    "odd sizes": (4, [3, 6, 12]),
    "odd sizes above": (13, [3, 6, 12]),
    "single": (1, [5]),
    "empty list": (1, []),
    "zero batch": (0, [1, 2, 4]),
    "negative batch": (-2, [1, 2, 4]),
}
EXPECTED_PICK = {"exact": 4, "between": 4, "smallest": 1, "largest": 8, "above": None,
                 "far above": None, "unsorted": 8, "odd sizes": 6, "odd sizes above": None,
                 "single": 5, "empty list": None, "zero batch": "ValueError",
                 "negative batch": "ValueError"}
DEFAULTS = {1: [1], 3: [1, 2], 6: [1, 2, 4], 8: [1, 2, 4, 8], 15: [1, 2, 4, 8],
            40: [1, 2, 4, 8, 16, 32], 48: [1, 2, 4, 8, 16, 32, 48]}
BAD_ARGUMENTS = {"max_batch_size 0": (0, None), "max_batch_size above model.max_batch": (49, None),
                 "bucket 0": (8, [0, 4]), "bucket above max_batch_size": (8, [4, 16]),
                 "no bucket": (8, [])}


def rank_buckets(ctx, pick_cases: dict, defaults: list[int], bad: dict) -> dict[str, Any]:
    """Every call in its own error scope (harness.cases): a stubbed GraphedDecoder does not
    hide pick_bucket's answers, nor the other way round."""
    from assignments.cuda_graph_decode.model import DecoderConfig, build_model
    from harness.cases import run_cases
    from harness.graphs import EmulatedGraph

    runner = ctx.impl_module("cuda_graph_decode", "runner")
    model = build_model(DecoderConfig(max_batch=48, max_len=8))

    def buckets_of(max_batch_size: int, buckets: list[int] | None = None) -> Any:
        decoder = runner.GraphedDecoder(model, max_batch_size, buckets=buckets,
                                        make_graph=EmulatedGraph)
        return list(decoder.buckets)

    cases: list[tuple[str, Callable[[], Any]]] = [
        (f"pick/{name}", lambda a=args: runner.pick_bucket(*a))
        for name, args in pick_cases.items()]
    cases += [(f"default/{n}", lambda n=n: buckets_of(n)) for n in defaults]
    cases.append(("custom", lambda: buckets_of(12, [8, 2, 12, 2])))
    cases += [(f"bad/{name}", lambda a=args: buckets_of(*a)) for name, args in bad.items()]
    return run_cases(ctx, cases)


@pytest.fixture(scope="module")
def answers(launch) -> dict[str, Any]:
    return launch(rank_buckets, world_size=1, timeout=60,
                  args=(PICK_CASES, list(DEFAULTS), BAD_ARGUMENTS)).values[0]


def _pick(answers: dict, name: str) -> Any:
    batch, buckets = PICK_CASES[name]
    return answer(answers, f"pick/{name}", f"pick_bucket({batch}, {buckets})",
                  expect_error=EXPECTED_PICK[name] == "ValueError")


def _buckets(answers: dict, name: str, max_batch_size: int, buckets: Any = None) -> Any:
    call = f"GraphedDecoder(model, max_batch_size={max_batch_size}" + (
        "" if buckets is None else f", buckets={buckets}") + ")"
    return answer(answers, name, call, expect_error=name.startswith("bad/"))


def _check_picks(answers: dict, names: list[str]) -> None:
    for name in names:
        got, want = _pick(answers, name), EXPECTED_PICK[name]
        batch, buckets = PICK_CASES[name]
        assert got == want, (f"pick_bucket({batch}, {buckets}) returned {got!r}, expected "
                             f"{want!r} (the smallest bucket >= batch_size, None above all)")


@pytest.mark.exercises("pick_bucket")
@pytest.mark.points(2)
def test_pick_bucket_exact_and_between(answers):
    _check_picks(answers, ["exact", "between", "smallest", "largest"])


@pytest.mark.exercises("pick_bucket")
@pytest.mark.points(2)
def test_pick_bucket_above_the_largest_is_none(answers):
    _check_picks(answers, ["above", "far above", "odd sizes above"])


@pytest.mark.exercises("pick_bucket")
@pytest.mark.points(2)
def test_pick_bucket_unsorted_and_odd_sizes(answers):
    _check_picks(answers, ["unsorted", "odd sizes", "single"])


@pytest.mark.exercises("pick_bucket")
@pytest.mark.points(1)
def test_pick_bucket_empty_list(answers):
    _check_picks(answers, ["empty list"])


@pytest.mark.exercises("pick_bucket")
@pytest.mark.points(1)
def test_pick_bucket_rejects_an_empty_batch(answers):
    _check_picks(answers, ["zero batch", "negative batch"])


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(2)
def test_default_buckets(answers):
    for n, want in DEFAULTS.items():
        got = _buckets(answers, f"default/{n}", n)
        assert got == want, (f"GraphedDecoder(model, max_batch_size={n}).buckets is {got!r}, "
                             f"expected {want}: 1, 2, 4, 8, then multiples of 16, all <= "
                             f"max_batch_size")


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(1)
def test_custom_buckets_sorted_and_distinct(answers):
    got = _buckets(answers, "custom", 12, [8, 2, 12, 2])
    assert got == [2, 8, 12], (f"buckets=[8, 2, 12, 2] gave decoder.buckets {got!r}, expected "
                               f"the sorted distinct sizes [2, 8, 12]")


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(1)
def test_bad_bucket_arguments_raise_value_error(answers):
    for name, (max_batch_size, buckets) in BAD_ARGUMENTS.items():
        got = _buckets(answers, f"bad/{name}", max_batch_size, buckets)
        assert got == "ValueError", (
            f"GraphedDecoder(max_batch_size={max_batch_size}, buckets={buckets}) on a model "
            f"with max_batch=48 ({name}): expected ValueError, got {got!r}")

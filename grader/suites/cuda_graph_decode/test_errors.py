"""Bad input: every malformed step raises ValueError before anything is copied or replayed, and
so does one above the largest bucket, which would run eagerly (buckets 1, 2, 4 of a decoder
with max_batch_size 8). A step before capture() raises RuntimeError."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from grader.suites.cuda_graph_decode._cases import CONFIG, answer

# name -> (tokens, positions, rows) as lists (2-D where a nested list)
CASES: dict[str, tuple[Any, Any, Any]] = {
    "empty batch": ([], [], []),
    "tokens longer than rows": ([1, 2, 3], [0, 0], [0, 1]),
    "rows longer than positions": ([1, 2], [0, 0], [0, 1, 2]),
    "positions longer than tokens and rows": ([1, 2], [0, 0, 0], [0, 1]),
    "2-D tokens": ([[1, 2]], [0, 0], [0, 1]),
    "position at max_len (the pad position)": ([1, 2], [0, CONFIG["max_len"]], [0, 1]),
    "position above max_len": ([1], [CONFIG["max_len"] + 5], [0]),
    "negative position": ([1, 2], [-1, 0], [0, 1]),
    "row at max_batch": ([1, 2], [0, 0], [0, CONFIG["max_batch"]]),
    "negative row": ([1], [0], [-1]),
    "repeated row": ([1, 2, 3], [0, 1, 2], [4, 5, 4]),
    "token at vocab_size": ([CONFIG["vocab_size"]], [0], [0]),
    "negative token": ([-3, 1], [0, 0], [0, 1]),
    # Batches above the largest bucket (4) run eagerly; they are checked all the same.
    "position at max_len in an eager batch": ([1] * 6, [0, 1, 2, 3, CONFIG["max_len"], 4],
                                              [0, 1, 2, 3, 4, 5]),
    "repeated row in an eager batch": ([1] * 6, [0] * 6, [0, 1, 2, 3, 4, 0]),
    "token at vocab_size in an eager batch": ([1, 2, 3, 4, 5, CONFIG["vocab_size"]], [0] * 6,
                                              [0, 1, 2, 3, 4, 5]),
}

# Valid steps on a decoder whose capture() was never called: RuntimeError, graphed or eager.
BEFORE_CAPTURE = {"a graphed batch": ([1, 2], [0, 0], [0, 1]),
                  "an eager batch": ([1] * 6, [0] * 6, [0, 1, 2, 3, 4, 5])}


def rank_errors(ctx, config: dict, cases: dict) -> dict[str, dict]:
    """For each case, step()'s outcome in its own error scope (harness.cases)."""
    from assignments.cuda_graph_decode.model import DecoderConfig, build_model
    from harness.cases import run_cases
    from harness.graphs import EmulatedGraph

    runner = ctx.impl_module("cuda_graph_decode", "runner")
    model = build_model(DecoderConfig(**config), dtype=torch.float64)
    decoder = runner.GraphedDecoder(model, 8, buckets=[1, 2, 4], make_graph=EmulatedGraph)
    decoder.capture()

    def step(inputs: tuple, on: Any = decoder) -> None:
        on.step(*(torch.tensor(x, dtype=torch.long) for x in inputs))

    uncaptured = runner.GraphedDecoder(model, 8, buckets=[1, 2, 4], make_graph=EmulatedGraph)
    before = [(f"{name} before capture()", lambda i=inputs: step(i, uncaptured))
              for name, inputs in BEFORE_CAPTURE.items()]
    return run_cases(ctx, [(name, lambda i=inputs: step(i)) for name, inputs in cases.items()]
                     + before)


@pytest.fixture(scope="module")
def outcomes(launch) -> dict[str, dict]:
    return launch(rank_errors, world_size=1, args=(CONFIG, CASES), timeout=60).values[0]


def _check(outcomes: dict[str, dict], names: list[str], error: str = "ValueError") -> None:
    for name in names:
        got = answer(outcomes, name, f"step() with {name}", expect_error=True)
        assert got == error, (f"step() with {name}: expected {error}, got "
                              f"{'no error' if got is None else got}")


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(2)
def test_empty_or_mismatched_batch(outcomes):
    _check(outcomes, ["empty batch", "tokens longer than rows", "rows longer than positions",
                      "positions longer than tokens and rows", "2-D tokens"])
    _check(outcomes, [f"{name} before capture()" for name in BEFORE_CAPTURE], "RuntimeError")


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(2)
def test_positions_out_of_range(outcomes):
    _check(outcomes, ["position at max_len (the pad position)", "position above max_len",
                      "negative position", "position at max_len in an eager batch"])


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(1)
def test_rows_out_of_range_or_repeated(outcomes):
    _check(outcomes, ["row at max_batch", "negative row", "repeated row",
                      "repeated row in an eager batch"])


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(1)
def test_tokens_out_of_range(outcomes):
    _check(outcomes, ["token at vocab_size", "negative token",
                      "token at vocab_size in an eager batch"])

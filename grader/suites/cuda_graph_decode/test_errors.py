"""Bad input: every malformed step raises ValueError before anything is copied or replayed."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from grader.suites.cuda_graph_decode._common import CONFIG

# name -> (tokens, positions, rows) as lists (2-D where a nested list)
CASES: dict[str, tuple[Any, Any, Any]] = {
    "empty batch": ([], [], []),
    "tokens longer than rows": ([1, 2, 3], [0, 0], [0, 1]),
    "rows longer than positions": ([1, 2], [0, 0], [0, 1, 2]),
    "2-D tokens": ([[1, 2]], [0, 0], [0, 1]),
    "position at max_len (the pad position)": ([1, 2], [0, CONFIG["max_len"]], [0, 1]),
    "position above max_len": ([1], [CONFIG["max_len"] + 5], [0]),
    "negative position": ([1, 2], [-1, 0], [0, 1]),
    "row at max_batch": ([1, 2], [0, 0], [0, CONFIG["max_batch"]]),
    "negative row": ([1], [0], [-1]),
    "repeated row": ([1, 2, 3], [0, 1, 2], [4, 5, 4]),
    "token at vocab_size": ([CONFIG["vocab_size"]], [0], [0]),
    "negative token": ([-3, 1], [0, 0], [0, 1]),
}


def rank_errors(ctx, config: dict, cases: dict) -> dict[str, str]:
    """For each case, the exception type step() raised, or "no error"."""
    from assignments.cuda_graph_decode.model import DecoderConfig, build_model
    from harness.graphs import EmulatedGraph

    runner = ctx.impl_module("cuda_graph_decode", "runner")
    model = build_model(DecoderConfig(**config), dtype=torch.float64)
    decoder = runner.GraphedDecoder(model, 4, make_graph=EmulatedGraph)
    decoder.capture()
    outcomes = {}
    for name, inputs in cases.items():
        tokens, positions, rows = (torch.tensor(x, dtype=torch.long) for x in inputs)
        try:
            decoder.step(tokens, positions, rows)
            outcomes[name] = "no error"
        except NotImplementedError:
            raise
        except Exception as exc:  # noqa: BLE001 - the type is the answer
            outcomes[name] = type(exc).__name__
    return outcomes


@pytest.fixture(scope="module")
def outcomes(launch) -> dict[str, str]:
    return launch(rank_errors, world_size=1, args=(CONFIG, CASES), timeout=60).values[0]


def _check(outcomes: dict[str, str], names: list[str]) -> None:
    for name in names:
        got = outcomes[name]
        assert got == "ValueError", f"step() with {name}: expected ValueError, got {got}"


@pytest.mark.points(2)
def test_empty_or_mismatched_batch(outcomes):
    _check(outcomes, ["empty batch", "tokens longer than rows", "rows longer than positions",
                      "2-D tokens"])


@pytest.mark.points(2)
def test_positions_out_of_range(outcomes):
    _check(outcomes, ["position at max_len (the pad position)", "position above max_len",
                      "negative position"])


@pytest.mark.points(1)
def test_rows_out_of_range_or_repeated(outcomes):
    _check(outcomes, ["row at max_batch", "negative row", "repeated row"])


@pytest.mark.points(1)
def test_tokens_out_of_range(outcomes):
    _check(outcomes, ["token at vocab_size", "negative token"])

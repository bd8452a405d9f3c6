"""FriendlyMLP: GraphBreakMLP's function, captured whole (8 points), one launch.

Values against `_ref.graph_break_mlp` (the provided model's function restated here in
float64), on inputs that take either side of its branch. Graphs: the model compiled with
`dynamic=True` and the suite's counting `eager` backend over three sequence lengths; graph
breaks read from Dynamo's counters in the rank, graphs from what the backend was handed
(judged here; no value compared, so the margin runs skip that compile).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from grader.compare import assert_close, bound
from grader.suites.framework._cases import GRAPH_LENGTHS, HIDDEN, friendly_cases
from grader.suites.framework._ranks import rank_compile
from grader.suites.framework._ref import graph_break_mlp
from harness.case_tests import CaseTests
from harness.cases import case_value
from harness.launcher import preload

preload("torch._dynamo")

BREAK_HINT = "graph break in FriendlyMLP: no .item(), no Python if on a tensor, no numpy, no print"
LENGTH_HINT = ("its graph depends on the sequence length: replace the Python loop over "
               "positions with tensor ops (torch.cumsum)")
VALUE_HINT = ("FriendlyMLP must compute GraphBreakMLP's function: divide h by max(max|h|, 1), "
              "exact gelu, running mean over positions, 1/sqrt(hidden), down, + x")


def run(launch: Any) -> tuple[dict, dict]:
    cases = friendly_cases()
    outcomes = launch(rank_compile, world_size=1, args=(cases,), timeout=120.0).values[0]
    return cases, outcomes


def _judge_values(case: dict, outs: Any, name: str) -> None:
    assert isinstance(outs, list) and len(outs) == len(case["inputs"]), (
        f"FriendlyMLP returned {type(outs).__name__}, expected one output per input")
    for x, out in zip(case["inputs"], outs, strict=True):
        want = graph_break_mlp(case["state"], x, HIDDEN)
        # depth: the linears (dim, hidden terms), the normalisation and the running mean
        tol = bound(torch.float32, depth=4 * HIDDEN + x.shape[1], magnitude=float(
            want.abs().max()) + 1.0)
        assert_close(out, want, dtype=torch.float32, tol=tol,
                     what=f"FriendlyMLP output, seq={x.shape[1]} ({name})", hint=VALUE_HINT,
                     hint_first=True)


def judge(results: tuple[dict, dict], key: str) -> None:
    cases, outcomes = results
    for name, case in cases.items():
        if not name.startswith(key):
            continue
        got = case_value(outcomes[name], f"FriendlyMLP ({name})")
        if case["run"] == "friendly_values":
            _judge_values(case, got, name)
            continue
        breaks = got["breaks"]
        assert not breaks, f"{BREAK_HINT}; Dynamo: {next(iter(breaks))[:120]}"
        assert got["graphs"] <= 1, (
            f"FriendlyMLP compiled {got['graphs']} graphs for {len(GRAPH_LENGTHS)} sequence "
            f"lengths with dynamic=True, expected 1: {LENGTH_HINT}")


FRIENDLY = CaseTests(run=run, judge=judge, exercises=lambda keys: ["FriendlyMLP"])
case_runs = FRIENDLY.fixture
test_friendly_mlp_equals_graph_break_mlp = FRIENDLY.test(4, "friendly-values")
# compares no value (the values are the test above's): the margin runs leave its compile out
test_friendly_mlp_has_no_graph_break_and_one_graph = pytest.mark.no_tolerance(
    FRIENDLY.test(4, "friendly-graphs"))

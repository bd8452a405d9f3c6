"""compile_model: fullgraph, at most one recompile over sequence lengths 8..64 (10 points).

The model is the suite's own (`Sequential(Linear, GELU, Linear)`, no graph break of its own), so
these points depend on `compile_model` alone. The backend passed in is the suite's counting
`eager` backend: the number of graphs is how many times Dynamo handed it one. Outputs are
compared bit for bit with the same model run eagerly in the rank (the eager backend runs the
same aten ops), so no tolerance is involved and the margin runs leave this launch out.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from grader.suites.framework._cases import COMPILE_LENGTHS, compile_cases
from grader.suites.framework._ranks import rank_compile
from harness.case_tests import CaseTests
from harness.cases import case_value
from harness.launcher import preload

preload("torch._dynamo")

RECOMPILE_HINT = ("one recompile per length: mark the sequence dimension dynamic "
                  "(torch._dynamo.mark_dynamic(x, 1)) or use dynamic=True, never dynamic=False")
BACKEND_HINT = "compile_model must pass `backend` to torch.compile unchanged"
FULLGRAPH_HINT = ("compile with fullgraph=True: a model with a graph break (an if on a "
                  "tensor) must make f(x) raise, not run in pieces")
VALUE_HINT = "f(x) must return model(x), computed by the compiled model with the given backend"


def run(launch: Any) -> tuple[dict, dict]:
    cases = compile_cases()
    outcomes = launch(rank_compile, world_size=1, args=(cases,), timeout=120.0).values[0]
    return cases, outcomes


def judge(results: tuple[dict, dict], key: str, aspect: str) -> None:
    cases, outcomes = results
    for name, case in cases.items():
        got = case_value(outcomes[name], f"compile_model ({name})")
        if case["run"] == "compile_breaking":
            if aspect == "graphs":
                assert got["raised"], f"compile_model: {FULLGRAPH_HINT}"
            continue
        if aspect == "graphs":
            assert got["graphs"] >= 1, (
                f"{BACKEND_HINT}: the suite's backend compiled no graph")
            assert not got["breaks"], (
                f"compile_model broke the graph of a model without breaks; Dynamo: "
                f"{next(iter(got['breaks']))[:120]}")
            assert got["graphs"] <= 2, (
                f"compile_model: {RECOMPILE_HINT} (got {got['graphs']} graphs for "
                f"{len(COMPILE_LENGTHS)} lengths, at most 2 allowed)")
            continue
        outs = got["outs"]
        assert isinstance(outs, list) and len(outs) == len(case["inputs"]), (
            "compile_model's callable must return one output per call")
        for x, out, eager in zip(case["inputs"], outs, got["eager"], strict=True):
            # The suite's backend runs the captured aten ops as eager does: bit for bit equal.
            assert isinstance(out, torch.Tensor) and torch.equal(out, eager), (
                f"compile_model output, seq={x.shape[1]}: {VALUE_HINT}")


COMPILED = CaseTests(run=run, judge=judge, exercises=lambda keys: ["compile_model"])
case_runs = COMPILED.fixture
test_compile_model_at_most_one_recompile = pytest.mark.no_tolerance(
    COMPILED.test(6, "compile", aspect="graphs"))
# compared exactly with the same model run eagerly in the rank: the margin runs leave it out
test_compile_model_outputs_equal_the_model = pytest.mark.no_tolerance(
    COMPILED.test(4, "compile", aspect="values"))

"""compile_model: fullgraph, at most one recompile over sequence lengths 8..64 (10 points).

The model is the suite's own (`Sequential(Linear, GELU, Linear)`, no graph break of its own), so
these points depend on `compile_model` alone. The backend passed in is the suite's counting
`eager` backend: the number of graphs is how many times Dynamo handed it one.
"""

from __future__ import annotations

from typing import Any

import torch

from grader.compare import assert_close
from grader.suites.framework._cases import COMPILE_LENGTHS, compile_cases
from grader.suites.framework._ranks import rank_compile
from grader.suites.framework._ref import sequential_mlp
from harness.case_tests import CaseTests
from harness.cases import case_value
from harness.launcher import preload

preload("torch._dynamo")

RECOMPILE_HINT = ("one recompile per length: mark the sequence dimension dynamic "
                  "(torch._dynamo.mark_dynamic(x, 1)) or use dynamic=True, never dynamic=False")
BACKEND_HINT = "compile_model must pass `backend` to torch.compile unchanged"


def run(launch: Any) -> tuple[dict, dict]:
    cases = compile_cases()
    outcomes = launch(rank_compile, world_size=1, args=(cases,), timeout=120.0).values[0]
    return cases, outcomes


def judge(results: tuple[dict, dict], key: str, aspect: str) -> None:
    cases, outcomes = results
    for name, case in cases.items():
        got = case_value(outcomes[name], f"compile_model ({name})")
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
        for x, out in zip(case["inputs"], outs, strict=True):
            assert_close(out, sequential_mlp(case["state"], x), dtype=torch.float32,
                         what=f"compile_model output, seq={x.shape[1]}",
                         hint="f(x) must return model(x)", hint_first=True)


COMPILED = CaseTests(run=run, judge=judge, exercises=lambda keys: ["compile_model"])
case_runs = COMPILED.fixture
test_compile_model_at_most_one_recompile = COMPILED.test(6, "compile", aspect="graphs")
test_compile_model_outputs_equal_the_model = COMPILED.test(4, "compile", aspect="values")

"""fuse_patterns on traced graphs (12 points), one launch; no Dynamo.

The suite traces its own functions with `torch.fx.symbolic_trace` in the rank, hands each
GraphModule to `fuse_patterns`, and sends back one word per node of the graph it returns and
its outputs. Expected node counts are stated by hand in `_cases.FX_EXPECTED`; outputs are
judged against the functions run here in float64.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from grader.compare import assert_close
from grader.suites.framework._cases import FX_EXPECTED, fx_cases
from grader.suites.framework._ranks import rank_fx
from grader.suites.framework._ranks_programs import FX_FUNCTIONS
from harness.case_tests import CaseTests
from harness.cases import case_value

SILU_HINT = ("rewrite x * sigmoid(x) (either order, operator/torch/method forms) into one "
             "F.silu(x) node and erase the sigmoid")
ADD_RELU_HINT = ("rewrite relu(a + b) (torch/F/method forms) into one add_relu(a, b) node and "
                 "erase the add")
SHARED_HINT = ("a pattern whose intermediate has another user (or whose add has keywords, or "
               "whose sigmoid is of another node) must stay as it was")
RECOMPILE_HINT = "call gm.recompile() after changing gm.graph"
BOTH_HINT = "rewrite every x * sigmoid(x) and relu(a + b) whose intermediate has one user"
HINTS = {"silu_forms": SILU_HINT, "add_relu_forms": ADD_RELU_HINT, "shared": SHARED_HINT}


def run(launch: Any) -> tuple[dict, dict]:
    cases = fx_cases()
    outcomes = launch(rank_fx, world_size=1, args=(cases,), timeout=60.0).values[0]
    return cases, outcomes


def judge_counts(name: str, fn: str, got: dict, hint: str) -> None:
    assert got["is_graph_module"], "fuse_patterns must return a torch.fx.GraphModule"
    kinds = Counter(got["kinds"])
    for kind, want in FX_EXPECTED[fn].items():
        assert kinds.get(kind, 0) == want, (
            f"fuse_patterns left {kinds.get(kind, 0)} {kind} node(s), expected {want}: {hint} "
            f"({name})")
    for kind, calls in got["code_calls"].items():
        assert calls == FX_EXPECTED[fn][kind], (
            f"fuse_patterns: the module's code calls {kind} {calls} time(s) but its graph has "
            f"{FX_EXPECTED[fn][kind]} such node(s): {RECOMPILE_HINT} ({name})")


def judge(results: tuple[dict, dict], key: str, aspect: str = "counts") -> None:
    cases, outcomes = results
    for name, case in cases.items():
        fn = case["fn"]
        if key != "all" and fn != key:
            continue
        got = case_value(outcomes[name], f"fuse_patterns ({name})")
        if aspect == "counts":
            judge_counts(name, fn, got, HINTS.get(key, BOTH_HINT))
            continue
        assert got["is_graph_module"], "fuse_patterns must return a torch.fx.GraphModule"
        want = FX_FUNCTIONS[fn](*[t.double() for t in case["inputs"]])
        assert_close(got["out"], want, dtype=torch.float32,
                     what=f"rewritten graph's output ({name})",
                     hint="the rewrite must not change what the graph computes (gm.recompile()?)",
                     hint_first=True)


FX = CaseTests(run=run, judge=judge, exercises=lambda keys: ["fuse_patterns"])
case_runs = FX.fixture
test_fuse_patterns_silu_forms = FX.test(3, "silu_forms")
test_fuse_patterns_add_relu_forms = FX.test(3, "add_relu_forms")
test_fuse_patterns_leaves_shared_intermediates = FX.test(4, "shared")
test_fuse_patterns_mixed_graph_and_outputs = FX.test(2, "all", aspect="outputs")

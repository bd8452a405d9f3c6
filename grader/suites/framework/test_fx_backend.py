"""fusing_backend under torch.compile (2 points), one launch of its own (Dynamo is slow).

The suite compiles its own function with `fullgraph=True` and a wrapper backend that calls
`fusing_backend` and records the node kinds of the GraphModule it returns.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from grader.compare import assert_close
from grader.suites.framework._cases import FX_EXPECTED, backend_cases
from grader.suites.framework._ranks import rank_fx
from grader.suites.framework._ranks_programs import FX_FUNCTIONS
from harness.case_tests import CaseTests
from harness.cases import case_value
from harness.launcher import preload

preload("torch._dynamo")


def run(launch: Any) -> tuple[dict, dict]:
    cases = backend_cases()
    outcomes = launch(rank_fx, world_size=1, args=(cases,), timeout=120.0).values[0]
    return cases, outcomes


def judge(results: tuple[dict, dict], key: str) -> None:
    cases, outcomes = results
    for name, case in cases.items():
        got = case_value(outcomes[name], f"fusing_backend ({name})")
        graphs = got["graphs"]
        assert len(graphs) == 1 and graphs[0], (
            "fusing_backend must return the rewritten torch.fx.GraphModule (fuse_patterns(gm))")
        kinds = Counter(graphs[0])
        for kind in ("silu", "add_relu"):
            want = FX_EXPECTED[case["fn"]][kind]
            assert kinds.get(kind, 0) == want, (
                f"fusing_backend returned a graph with {kinds.get(kind, 0)} {kind} node(s), "
                f"expected {want}: return fuse_patterns(gm)")
        want_out = FX_FUNCTIONS[case["fn"]](*[t.double() for t in case["inputs"]])
        assert_close(got["out"], want_out, dtype=torch.float32, what="compiled output",
                     hint="the backend's graph must compute what the function does",
                     hint_first=True)


BACKEND = CaseTests(run=run, judge=judge, exercises=lambda keys: ["fusing_backend"])
case_runs = BACKEND.fixture
test_fusing_backend_under_torch_compile = BACKEND.test(2, "backend")

"""nd_parallel: `example` on every case of the table, in one launch.

TODO(grader new): the real tests (values, cost, discipline, bad input), each declaring what it exercises.
"""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close
from grader.seeds import seeded_generator
from grader.suites.nd_parallel._cases import CASES
from grader.suites.nd_parallel._ranks import rank_example
from grader.suites.nd_parallel._ref import example_ref
from harness.cases import case_value


@pytest.fixture(scope="module")
def run(launch):
    generator = seeded_generator(0)
    inputs = {name: torch.randn(numel, generator=generator) for name, numel in CASES.items()}
    return inputs, launch(rank_example, world_size=1, args=(inputs,)).values[0]


@pytest.mark.points(80)
@pytest.mark.exercises("example")
def test_example_on_every_case(run):
    inputs, outcomes = run
    for name, x in inputs.items():
        got = case_value(outcomes[name], f"example on {name}")
        assert_close(got, example_ref(x), dtype=torch.float32, what=f"example, {name}",
                     hint="return x times 2", hint_first=True)

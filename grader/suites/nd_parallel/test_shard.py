"""`shard_params` (README §4), one rank: Megatron's cut of the MLP for several TP sizes and
ranks (w1, b1 by rows; w2 by the same columns; b2 whole), new tensors, the input unchanged;
ValueError for an ffn that does not split and a rank outside the group.
"""

from __future__ import annotations

import pytest

from grader.compare import Tolerance
from grader.suites.nd_parallel import _cases as C
from grader.suites.nd_parallel._cases_launches import expected, run, values
from grader.suites.nd_parallel._ref_judge import check_shards

pytestmark = pytest.mark.exercises("shard_params")
HINT = ("w1 and b1 keep rows [j*ffn/T, (j+1)*ffn/T), w2 the same columns, b2 whole "
        "(use the TP rank j, not the global rank)")
EXACT = Tolerance(rtol=0.0, atol=0.0)  # a slice is a copy: no rounding at all


@pytest.mark.points(2)
def test_shard_params_cuts_like_megatron(launch, impl):
    result = run(launch, impl, "pure")
    for label in C.SHARD_CASES:
        name = f"shard {label}"
        got = values(result, name)[0]
        check_shards(got["shards"], expected("pure", name), f"shard_params ({label})",
                     EXACT, HINT)
        assert got["input_unchanged"], (
            f"shard_params ({label}): return new tensors and leave params unchanged — writing "
            f"to a returned shard changed the input (a view, not a copy?)")


@pytest.mark.points(1)
def test_shard_params_rejects_what_does_not_split(launch, impl):
    result = run(launch, impl, "pure")
    for label in C.SHARD_BAD:
        got = values(result, f"shard {label}")[0]
        assert got == "ValueError", (
            f"shard_params with {label}: raise ValueError when ffn does not split over "
            f"tp_size or tp_rank is outside [0, tp_size) — {got}")

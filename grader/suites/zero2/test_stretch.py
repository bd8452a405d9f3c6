"""Stretch: gradient reduce-scatters overlap backward, launched from grad hooks, asynchronously.

3 ranks train an MLP 4 -> 24 -> 48 -> 48 -> 24 -> 3 (4923 parameters; the first layer, whose
gradients backward produces last, holds 120 of them). Before building the optimizer the rank
registers its own post-accumulate-grad hook on every trainable parameter and adds a
`last gradient` mark to the log when the last one of a backward pass fires. In every step the
first gradient message (a reduce-scatter, or an isend of your own ring) must come before that
mark and be asynchronous (async_op=True, or isend/batch_isend_irecv), and the results must
still equal the single-process run.
"""

from __future__ import annotations

import pytest

from grader.suites.zero2._cases import LAUNCH_TIMEOUT, make_data, rank_slices
from grader.suites.zero2._ranks import build_model, make_optimizer, train
from grader.suites.zero2._ref import REDUCE_SCATTER_OPS, SEND_OPS, assert_history, reference_run
from harness.cases import where
from harness.commlog import windows

# Every test calls the module's one public name.
pytestmark = pytest.mark.exercises("Zero2Optimizer")

WORLD = 3
SPEC = {"arch": "mlp", "widths": [4, 24, 48, 48, 24, 3], "dtype": "float64", "frozen": [],
        "optimizer": "adamw", "defaults": {"lr": 1e-3}, "groups": None, "steps": 3, "batch": 2,
        "clip": None, "seed": 61}
LAST = "last gradient"


def rank_overlap(ctx, spec, x, y):
    model = build_model(spec)
    trainable = [p for p in model.parameters() if p.requires_grad]
    seen = {"count": 0}

    def on_grad(_param):
        seen["count"] += 1
        if seen["count"] == len(trainable):  # the last gradient of this backward pass
            seen["count"] = 0
            ctx.mark(LAST)

    for p in trainable:  # registered first, so it runs before the optimizer's own hooks
        p.register_post_accumulate_grad_hook(on_grad)
    opt = make_optimizer(ctx, spec, model)
    return train(ctx, spec, model, opt, x, y, range(spec["steps"]))


def _first_gradient_message(records: list) -> tuple[int, object] | None:
    for i, rec in enumerate(records):
        if rec.op in REDUCE_SCATTER_OPS or rec.op in SEND_OPS:
            return i, rec
    return None


@pytest.mark.points(10)
def test_reduce_scatter_overlaps_backward(launch):
    x, y = make_data(SPEC, WORLD)
    result = launch(rank_overlap, world_size=WORLD, args=(SPEC,),
                    rank_args=rank_slices(x, y, WORLD), timeout=LAUNCH_TIMEOUT)
    for rank, records in enumerate(result.comm):
        steps = windows(records, "step ")
        for step in range(SPEC["steps"]):
            step_records = steps.get(f"step {step}", [])
            labels = [rec.label for rec in step_records if rec.op == "mark"]
            what = f"{where(rank, WORLD)} step {step + 1}"
            assert LAST in labels, f"{what}: the test's gradient hooks never fired (suite error?)"
            last_at = next(i for i, rec in enumerate(step_records) if rec.label == LAST)
            first = _first_gradient_message(step_records)
            assert first is not None and first[0] < last_at, (
                f"{what}: the first gradient reduce-scatter starts after backward produced its "
                f"last gradient; launch each bucket from post-accumulate-grad hooks as soon as "
                f"it is full (buckets of at most a few hundred elements here)")
            rec = first[1]
            assert rec.async_op or rec.batched or rec.op == "isend", (
                f"{what}: the reduce-scatter launched during backward is synchronous "
                f"({rec.op} without async_op=True); backward should not wait for it")
    assert_history(result.values, reference_run(SPEC, x, y), WORLD,
                   hint="with overlap the results must stay exact: wait for every bucket "
                        "before step uses the gradient shard")


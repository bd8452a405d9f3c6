"""Values: graphed decode equals eager decode, step by step, and leaves the same KV cache.

Every row first gets a history of 4 tokens decoded eagerly; then the decoder under test is
captured (default buckets 1, 2, 4, 8) and runs 20 steps of varying batch sizes over random rows,
some above the largest bucket; another decoder has max_batch_size 12 with those buckets, so
batches of 9 to 12 run eagerly; one has a single bucket; in one schedule rows decode a position
again. The reference is the provided model run eagerly in this
process from the same seed.
"""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close
from grader.suites.cuda_graph_decode._cases import make_spec, sizes_of
from grader.suites.cuda_graph_decode._ranks import rank_decode
from grader.suites.cuda_graph_decode._ref import assert_caches, assert_step_logits, reference
from harness.cases import Memo

FIRST_SIZES = [1, 2, 3, 5, 8]
LONG = make_spec(FIRST_SIZES + [4, 7, 10, 6, 3, 8, 12, 2, 5, 1, 7, 3, 6, 4, 8], seed=3)
CUSTOM = make_spec([1, 2, 3, 4, 6, 7, 5, 2], seed=5, max_batch_size=6, buckets=[6, 3])
FLOAT32 = make_spec([3, 8, 1], seed=7, dtype="float32")
# max_batch_size 12 with the default buckets 1, 2, 4, 8: batches 9 to 12 have no graph.
GAP = make_spec([10, 3, 12, 9, 8, 11], seed=9, max_batch_size=12)
SINGLE = make_spec([1, 4, 6, 3, 5, 2], seed=17, max_batch_size=6, buckets=[4])


def rewind_spec() -> dict:
    """Rows decode a position again with another token (a rejected draft token, a switched
    beam): a step of 4 rows, then 3 of them redo their position in another order, then one
    goes on. A slot of the bucket left holding the earlier step's entry writes its old token
    over the new one."""
    spec = make_spec([4], seed=15)
    (tokens, positions, rows), = spec["steps"]
    order = torch.tensor([3, 0, 1])
    redo = ((tokens[order] + 7) % spec["config"]["vocab_size"], positions[order], rows[order])
    spec["steps"] = [spec["steps"][0], redo, (tokens[3:], positions[3:] + 1, rows[3:])]
    return spec


REWIND = rewind_spec()
PADDING_HINT = ("check that padded slots hold pad entries (position model.pad_position), that "
                "inputs are copy_-ed into the buffers the graph captured, and that each step "
                "replays the bucket from pick_bucket")


@pytest.fixture(scope="module")
def runs(launch):
    """runs(name) -> (spec, rank result, eager reference); each spec runs once, and a launch
    that failed fails every test of its spec with the same reason (harness.cases.Memo)."""
    specs = {"long": LONG, "custom": CUSTOM, "float32": FLOAT32, "gap": GAP, "single": SINGLE,
             "rewind": REWIND}
    memo = Memo()

    def make(name: str) -> tuple[dict, dict, dict]:
        spec = specs[name]
        run = launch(rank_decode, world_size=1, args=(spec,), timeout=120).values[0]
        return spec, run, reference(spec)

    return lambda name: memo.get(name, lambda: make(name))


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(2)
@pytest.mark.parametrize("size", FIRST_SIZES, ids="batch_size={}".format)
def test_batch_size_matches_eager(runs, size):
    spec, run, ref = runs("long")
    assert_step_logits(run, ref, spec, FIRST_SIZES.index(size), hint=PADDING_HINT)


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(7)
def test_twenty_steps_of_varying_sizes(runs):
    spec, run, ref = runs("long")
    for index in range(len(spec["steps"])):
        assert_step_logits(run, ref, spec, index, hint=PADDING_HINT)


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(5)
def test_kv_cache_after_the_steps_matches_eager(runs):
    _, run, ref = runs("long")
    assert_caches(run, ref, hint="padded entries must write only the pad slot "
                                 "(position model.pad_position), never a real row's slot")
    spec, run, ref = runs("rewind")
    hint = ("a row may decode a position again with another token: every padded slot must "
            "hold a pad entry, not the entry an earlier step left there")
    for index in range(len(spec["steps"])):
        assert_step_logits(run, ref, spec, index, hint=hint)
    assert_caches(run, ref, hint=hint)


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(4)
def test_capture_leaves_the_cache_unchanged(runs):
    _, run, _ = runs("long")
    change = run["capture_change"]
    assert change == 0.0, (
        f"capture() changed real slots of the KV cache by up to {change:.3g}; the warm-up runs "
        f"eagerly, so its entries must be pad entries (position model.pad_position)")


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(3)
def test_batches_above_the_largest_bucket_match_eager(runs):
    hint = "batches above the largest bucket run model.decode eagerly"
    spec, run, ref = runs("long")
    above = [i for i, size in enumerate(sizes_of(spec)) if size > max(run["buckets"])]
    for index in above:
        assert_step_logits(run, ref, spec, index, hint=hint)
    # Also those up to max_batch_size when the largest bucket is smaller than it.
    spec, run, ref = runs("gap")
    for index in range(len(spec["steps"])):
        assert_step_logits(run, ref, spec, index, hint=f"max_batch_size=12, buckets "
                           f"{run['buckets']}: {hint}, up to max_batch_size and beyond")
    assert_caches(run, ref, hint=hint)


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(3)
def test_custom_buckets(runs):
    spec, run, ref = runs("custom")
    assert run["buckets"] == [3, 6], f"buckets=[6, 3] gave decoder.buckets {run['buckets']}, " \
                                     f"expected the sorted distinct sizes [3, 6]"
    for index in range(len(spec["steps"])):
        assert_step_logits(run, ref, spec, index, hint=PADDING_HINT)
    assert_caches(run, ref, hint="padded entries must write only the pad slot")
    spec, run, ref = runs("single")
    assert run["buckets"] == [4], f"buckets=[4] gave decoder.buckets {run['buckets']}"
    for index in range(len(spec["steps"])):
        assert_step_logits(run, ref, spec, index, hint=f"one bucket, [4]: {PADDING_HINT}")


@pytest.mark.exercises("GraphedDecoder")
@pytest.mark.points(1)
def test_float32_model(runs):
    spec, run, ref = runs("float32")
    for index in range(len(spec["steps"])):
        assert_close(run["logits"][index], ref["logits"][index], scale=10.0,
                     what=f"float32 model: logits of step {index + 1}",
                     hint="return the model's dtype; keep the static buffers int64")

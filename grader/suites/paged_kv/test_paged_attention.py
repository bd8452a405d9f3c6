"""paged_attention against dense attention computed in the parent, and a vectorisation check.

Caches are filled with random values everywhere, so slots past a sequence's length and
blocks named by no table hold garbage that must not leak into the result. Block tables use
shuffled block ids and are padded with -1 (sometimes by more than one column).
"""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close
from grader.suites.paged_kv._cases import make_case
from grader.suites.paged_kv._ref_decoder import dense_attention
from harness.cases import case_value, run_cases


def rank_attention(ctx, cases):
    """Each case in its own error scope: a crash in one configuration fails only its test."""
    cache = ctx.impl_module("paged_kv", "cache")
    return run_cases(ctx, [
        (name, lambda c=c: cache.paged_attention(c["q"], c["k_cache"], c["v_cache"], c["tables"],
                                                 c["lens"], c.get("scale")))
        for name, c in cases.items()])


def rank_count_ops(ctx, cases):
    """torch function calls per call, for a short and a long context (block_size 1)."""
    from torch.overrides import TorchFunctionMode

    cache = ctx.impl_module("paged_kv", "cache")

    class Count(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.calls += 1
            return func(*args, **(kwargs or {}))

    counts = {}
    for name, c in cases.items():
        cache.paged_attention(c["q"], c["k_cache"], c["v_cache"], c["tables"], c["lens"])
        with Count() as counter:
            cache.paged_attention(c["q"], c["k_cache"], c["v_cache"], c["tables"], c["lens"])
        counts[name] = counter.calls
    return counts


CASES = {
    "random": make_case(1, [1, 4, 8, 13, 30, 16], block_size=4, heads=4, kv_heads=4, dim=16,
                        dtype=torch.float64, extra_pad=2),
    "boundaries": make_case(2, [1, 16, 17, 33, 32], block_size=16, heads=2, kv_heads=2, dim=8,
                            dtype=torch.float32, scale=0.3),
    "block_size_one": make_case(3, [1, 2, 5, 9], block_size=1, heads=3, kv_heads=3, dim=4,
                                dtype=torch.float64),
    "gqa": make_case(4, [3, 11, 8, 1], block_size=4, heads=8, kv_heads=2, dim=8,
                     dtype=torch.float64),
    # 3 query heads over 2 KV heads: not grouped-query attention, a ValueError.
    "heads_not_a_multiple": make_case(7, [2, 5], block_size=4, heads=3, kv_heads=2, dim=4,
                                      dtype=torch.float32),
}

COUNT_CASES = {
    "short": make_case(5, [3, 4], block_size=1, heads=2, kv_heads=2, dim=4, dtype=torch.float32,
                       extra_pad=0, num_blocks=140),
    "long": make_case(6, [60, 64], block_size=1, heads=2, kv_heads=2, dim=4, dtype=torch.float32,
                      extra_pad=0, num_blocks=140),
}


@pytest.fixture(scope="module")
def outputs(launch):
    return launch(rank_attention, world_size=1, args=(CASES,), timeout=60).values[0]


def _check(outputs, name: str, *, hint: str) -> None:
    what = f"paged_attention ({name} case)"
    got = case_value(outputs[name], what)
    assert_close(got, dense_attention(CASES[name]), dtype=CASES[name]["q"].dtype,
                 what=what, hint=hint, hint_first=True)


@pytest.mark.exercises("paged_attention")
@pytest.mark.points(3)
def test_matches_dense_attention_random_lengths(outputs):
    _check(outputs, "random", hint="mask every position >= context_lens[b], including the rest "
                                   "of the last block, and ignore -1 table entries")


@pytest.mark.exercises("paged_attention")
@pytest.mark.points(2)
def test_lengths_one_and_exact_block_boundaries_with_a_scale(outputs):
    _check(outputs, "boundaries", hint="positions 0 .. context_lens[b] - 1 are attended; use "
                                       "the given scale")


@pytest.mark.exercises("paged_attention")
@pytest.mark.points(2)
def test_block_size_one(outputs):
    _check(outputs, "block_size_one", hint="slot = table[p // block_size] * block_size + "
                                           "p % block_size")


@pytest.mark.exercises("paged_attention")
@pytest.mark.points(2)
def test_grouped_query_attention(outputs):
    _check(outputs, "gqa", hint="query head h reads KV head h // (num_heads // kv_heads)")


@pytest.mark.exercises("paged_attention")
@pytest.mark.points(1)
def test_query_heads_not_a_multiple_of_kv_heads_raise_value_error(outputs):
    outcome = outputs["heads_not_a_multiple"]
    if not outcome["ok"] and outcome["error"]["not_implemented"]:
        case_value(outcome, "paged_attention (query heads not a multiple of KV heads)")
    got = "returned a result" if outcome["ok"] else f"raised {outcome['error']['type']}"
    assert not outcome["ok"] and outcome["error"]["type"] == "ValueError", (
        f"paged_attention with num_heads not a multiple of kv_heads {got}, expected "
        f"ValueError; check num_heads % kv_heads before viewing the queries")


@pytest.mark.exercises("paged_attention")
@pytest.mark.points(2)
def test_no_python_loop_over_tokens(launch):
    counts = launch(rank_count_ops, world_size=1, args=(COUNT_CASES,), timeout=60).values[0]
    short, long = counts["short"], counts["long"]
    assert long <= 2 * short + 8, (
        f"paged_attention made {long} torch calls for a 64-token context but {short} for a "
        f"4-token one (block_size 1): the work grows with the context, so it loops in Python "
        f"over tokens or blocks; gather all blocks with one indexing operation instead")

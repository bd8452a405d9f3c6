"""write_kv and copy_blocks on real tensors, against plain-torch expectations in the parent."""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close
from grader.seeds import seeded_generator
from harness.cases import case_value, run_cases

SHAPE = (6, 4, 2, 3)  # [num_blocks, block_size, kv_heads, head_dim]


def rank_cache_ops(ctx, cases):
    """Each case in its own error scope: a stubbed copy_blocks does not hide write_kv."""
    cache = ctx.impl_module("paged_kv", "cache")

    def run(case):
        k_cache, v_cache = case["k_cache"].clone(), case["v_cache"].clone()
        if "copies" in case:
            cache.copy_blocks(k_cache, v_cache, case["copies"])
        else:
            cache.write_kv(k_cache, v_cache, case["k"], case["v"], case["slots"])
        return {"k_cache": k_cache, "v_cache": v_cache}

    return run_cases(ctx, [(name, lambda c=case: run(c)) for name, case in cases.items()])


def _cases() -> dict[str, dict]:
    gen = seeded_generator(3)
    numel = SHAPE[0] * SHAPE[1]

    def cache() -> torch.Tensor:
        return torch.randn(SHAPE, generator=gen)

    def rows(n: int) -> torch.Tensor:
        return torch.randn(n, *SHAPE[2:], generator=gen)

    write_slots = torch.randperm(numel, generator=gen)[:11]
    skip_slots = torch.randperm(numel - 1, generator=gen)[:6]
    skip_slots[[0, 3, 5]] = -1  # padding rows, 1e6 below so a stray write is obvious
    skip_k, skip_v = rows(6), rows(6)
    skip_k[[0, 3, 5]] = 1e6
    skip_v[[0, 3, 5]] = -1e6
    return {
        "write": {"k_cache": cache(), "v_cache": cache(), "k": rows(11), "v": rows(11),
                  "slots": write_slots},
        "skip": {"k_cache": cache(), "v_cache": cache(), "k": skip_k, "v": skip_v,
                 "slots": skip_slots},
        "copy": {"k_cache": cache(), "v_cache": cache(), "copies": [(0, 3), (2, 5), (4, 1)]},
    }


def _expected_write(case: dict) -> tuple[torch.Tensor, torch.Tensor]:
    k_cache, v_cache = case["k_cache"].clone(), case["v_cache"].clone()
    for i, slot in enumerate(case["slots"].tolist()):
        if slot >= 0:
            k_cache[slot // SHAPE[1], slot % SHAPE[1]] = case["k"][i]
            v_cache[slot // SHAPE[1], slot % SHAPE[1]] = case["v"][i]
    return k_cache, v_cache


@pytest.fixture(scope="module")
def cases():
    return _cases()


@pytest.fixture(scope="module")
def results(launch, cases):
    outcomes = launch(rank_cache_ops, world_size=1, args=(cases,), timeout=60).values[0]

    def get(name: str) -> dict:
        call = "copy_blocks" if name == "copy" else "write_kv"
        return case_value(outcomes[name], f"{call} ({name} case)")

    return get


@pytest.mark.exercises("write_kv")
@pytest.mark.points(2)
def test_write_kv_stores_each_token_in_its_slot(results, cases):
    k_exp, v_exp = _expected_write(cases["write"])
    for name, got, exp in (("k_cache", results("write")["k_cache"], k_exp),
                           ("v_cache", results("write")["v_cache"], v_exp)):
        assert_close(got, exp, what=f"{name} after write_kv", hint_first=True,
                     hint="slot s is cache[s // block_size, s % block_size]; other slots "
                          "unchanged")


@pytest.mark.exercises("write_kv")
@pytest.mark.points(2)
def test_write_kv_skips_slot_minus_one(results, cases):
    k_exp, v_exp = _expected_write(cases["skip"])
    got = results("skip")["k_cache"]
    if bool((got.abs() >= 1e5).any()):
        raise AssertionError("write_kv wrote a padding row (slot -1) into the cache; skip "
                             "entries of slot_mapping that are -1 (negative indexing wraps to "
                             "the last slot)")
    assert_close(got, k_exp, what="k_cache after write_kv with padding slots")
    assert_close(results("skip")["v_cache"], v_exp, what="v_cache after write_kv with padding")


@pytest.mark.exercises("copy_blocks")
@pytest.mark.points(2)
def test_copy_blocks_copies_whole_blocks_of_both_caches(results, cases):
    case = cases["copy"]
    for name in ("k_cache", "v_cache"):
        expected = case[name].clone()
        for src, dst in case["copies"]:
            expected[dst] = expected[src]
        assert_close(results("copy")[name], expected, what=f"{name} after copy_blocks",
                     hint_first=True, hint="copy every (src, dst) pair in both caches, keys "
                                           "and values; leave other blocks alone")

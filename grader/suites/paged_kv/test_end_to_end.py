"""End to end: a tiny decoder generates the same tokens with the paged cache as with a
contiguous one, over many steps, with forks (parallel sampling) and frees.

The rank runs `_decoder.generate` with `PagedCache` (the allocator, `write_kv`, `copy_blocks`
and `paged_attention` under test); the parent runs the same script with `ContiguousCache`,
plain torch. float64 and greedy decoding, so the token streams must be equal.
"""

from __future__ import annotations

import pytest

from grader.suites.paged_kv._ranks_decoder import PagedCache, generate, make_weights
from grader.suites.paged_kv._ref_decoder import ContiguousCache

SEED = 11
NUM_BLOCKS = 64
BLOCK_SIZE = 4

BATCH_SCRIPT = [
    ("prompt", 0, [5, 17, 3, 9, 30]),
    ("prompt", 1, [1, 2, 3, 4, 5, 6, 7, 8, 9]),
    ("prompt", 2, [40, 41, 42]),
    *[("step",)] * 18,
]

FORK_SCRIPT = [
    ("prompt", 0, [8, 6, 4, 2, 1, 3]),
    ("fork", 0, 1, 1), ("fork", 0, 2, 2), ("fork", 0, 3, 3),  # four samples of one prompt
    *[("step",)] * 5,
    ("fork", 2, 4, 1),                    # a fork in the middle of a block: copy-on-write
    ("step",), ("step",),
    ("free", 1),
    ("prompt", 5, [11, 12, 13, 14, 15, 16, 17, 18]),
    *[("step",)] * 7,
    ("fork", 5, 6, 0), ("free", 0),
    *[("step",)] * 6,
]

SCRIPTS = {"batch": BATCH_SCRIPT, "forks": FORK_SCRIPT}


def rank_generate(ctx, scripts, seed, num_blocks, block_size):
    allocator = ctx.impl_module("paged_kv", "allocator")
    cache = ctx.impl_module("paged_kv", "cache")
    weights = make_weights(seed)
    return {name: generate(weights, PagedCache(allocator, cache, num_blocks, block_size), script)
            for name, script in scripts.items()}


@pytest.fixture(scope="module")
def generated(launch):
    return launch(rank_generate, world_size=1,
                  args=(SCRIPTS, SEED, NUM_BLOCKS, BLOCK_SIZE), timeout=120).values[0]


def _compare(generated, name: str) -> None:
    expected = generate(make_weights(SEED), ContiguousCache(), SCRIPTS[name])
    got = generated[name]
    for seq, tokens in expected.items():
        mine = got.get(seq, [])
        if mine != tokens:
            step = next((i for i, (a, b) in enumerate(zip(mine, tokens)) if a != b),
                        min(len(mine), len(tokens)))
            raise AssertionError(
                f"the paged cache generated different tokens from the contiguous cache "
                f"({name} run, sequence {seq}, first at generated token {step}); check "
                f"write_kv slots, copy-on-write copies and paged_attention's masking\n"
                f"  paged:      {mine}\n  contiguous: {tokens}")


@pytest.mark.exercises("BlockAllocator", "write_kv", "copy_blocks", "paged_attention")
@pytest.mark.points(3)
def test_batched_greedy_decoding_matches_a_contiguous_cache(generated):
    _compare(generated, "batch")


@pytest.mark.exercises("BlockAllocator", "write_kv", "copy_blocks", "paged_attention")
@pytest.mark.points(3)
def test_parallel_sampling_with_forks_matches_a_contiguous_cache(generated):
    _compare(generated, "forks")

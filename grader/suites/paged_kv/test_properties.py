"""Property-based operation sequences (hypothesis) on BlockAllocator and PrefixCachingAllocator.

The parent draws sequences of allocate / append_slot / fork / free / can_allocate (and
allocate_prompt for the prefix cache) from fixed seeds, sends every config's sequences to one
rank launch, and judges each returned trace against the reference model: expected errors,
the invariants after every operation (free + used = total; reference counts equal occurrences
in live tables, seen through copy-on-write and free; waste under one block per sequence; no
write into a block another sequence holds; everything free at the end), and the exact tables,
lengths, copies, cached-token counts and eviction choices.
"""

from __future__ import annotations

import pytest

from grader.suites.paged_kv._gen import draw_sequences
from grader.suites.paged_kv._model import judge_all
from grader.suites.paged_kv._ranks import job_traces, rank_run_ops

EXAMPLES = 30
CONFIGS = {
    "tokens_are_blocks": {"name": "tokens_are_blocks", "num_blocks": 10, "block_size": 1,
                          "seed": 1},
    "forks": {"name": "forks", "num_blocks": 12, "block_size": 4, "seed": 2},
    "tiny_pool": {"name": "tiny_pool", "num_blocks": 3, "block_size": 2, "seed": 3},
    "prefix": {"name": "prefix", "num_blocks": 10, "block_size": 2, "seed": 4, "prefix": True},
    "prefix_roomy": {"name": "prefix_roomy", "num_blocks": 16, "block_size": 3, "seed": 5,
                     "prefix": True},
    "prefix_tight": {"name": "prefix_tight", "num_blocks": 6, "block_size": 2, "seed": 6,
                     "prefix": True},
}


@pytest.fixture(scope="module")
def runs(launch):
    sequences = {name: draw_sequences(config, EXAMPLES) for name, config in CONFIGS.items()}
    jobs = [{"config": CONFIGS[name], "sequences": seqs} for name, seqs in sequences.items()]
    traces = launch(rank_run_ops, world_size=1, args=(jobs,), timeout=120).values[0]
    return {name: (sequences[name], job) for name, job in zip(CONFIGS, traces, strict=True)}


def _judge(runs, name: str) -> None:
    sequences, outcome = runs[name]
    judge_all(CONFIGS[name], sequences, job_traces(outcome, CONFIGS[name]))


@pytest.mark.exercises("BlockAllocator")
@pytest.mark.points(4)
def test_random_sequences_block_size_one(runs):
    _judge(runs, "tokens_are_blocks")


@pytest.mark.exercises("BlockAllocator")
@pytest.mark.points(4)
def test_random_sequences_with_forks_and_copy_on_write(runs):
    _judge(runs, "forks")


@pytest.mark.exercises("BlockAllocator")
@pytest.mark.points(4)
def test_random_sequences_in_a_three_block_pool(runs):
    _judge(runs, "tiny_pool")


@pytest.mark.exercises("PrefixCachingAllocator")
@pytest.mark.points(2)
def test_random_prefix_cache_sequences(runs):
    _judge(runs, "prefix")


@pytest.mark.exercises("PrefixCachingAllocator")
@pytest.mark.points(1)
def test_random_prefix_cache_sequences_roomy_pool(runs):
    _judge(runs, "prefix_roomy")


@pytest.mark.exercises("PrefixCachingAllocator")
@pytest.mark.points(1)
def test_random_prefix_cache_sequences_tight_pool(runs):
    _judge(runs, "prefix_tight")

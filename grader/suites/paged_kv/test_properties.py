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

from grader.suites.paged_kv._cases import draw_sequences, job_tests

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


# Drawn when the module is collected (about a second): the sequences are the jobs' data.
PROPERTIES = job_tests({name: (config, draw_sequences(config, EXAMPLES))
                       for name, config in CONFIGS.items()}, timeout=120)
case_runs = PROPERTIES.fixture

test_random_sequences_block_size_one = PROPERTIES.test(4, "tokens_are_blocks")
test_random_sequences_with_forks_and_copy_on_write = PROPERTIES.test(4, "forks")
test_random_sequences_in_a_three_block_pool = PROPERTIES.test(4, "tiny_pool")
test_random_prefix_cache_sequences = PROPERTIES.test(2, "prefix")
test_random_prefix_cache_sequences_roomy_pool = PROPERTIES.test(1, "prefix_roomy")
test_random_prefix_cache_sequences_tight_pool = PROPERTIES.test(1, "prefix_tight")

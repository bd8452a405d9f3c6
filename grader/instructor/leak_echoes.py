"""Comparisons the leak check (grader/leakcheck.py) lets through: their expected value is, by
design, an input the rank was given or a slice of one. Instructor-only: it names hidden tests,
so it lives here and never ships in a student release."""

from __future__ import annotations

# (part of the test's node id, part of the sent argument's path, why): comparisons whose
# expected value is, by design, an input the rank was given or a slice of one.
ECHO_CHECKS: tuple[tuple[str, str, str], ...] = (
    ("tensor_parallel/test_cross_entropy.py::test_loss_with_targets_in_every_shard",
     "['logits']", "the logits shard must come back unchanged (no in-place edit)"),
    ("tensor_parallel/test_layers.py::test_column_parameters_are_row_slices", "['state']",
     "a layer built from the dense weights must hold its slice of them"),
    ("tensor_parallel/test_layers.py::test_row_parameters_are_column_slices", "['state']",
     "a layer built from the dense weights must hold its slice of them"),
    ("moe/test_all_to_all.py::test_forward[world_size=2-one_rank_sends_nothing]",
     "['xs'][1]", "rank 0 sends nothing: rank 1 receives only its own rows back"),
    ("moe/test_construction.py::test_from_dense_copies", "['dense']",
     "from_dense must hold copies of the dense weights it was given, equal to them"),
    ("paged_kv/test_cache_ops.py::test_copy_blocks_copies_whole_blocks_of_both_caches",
     "['copy']", "copy_blocks' result is made of its input's blocks"),
    ("triton_kernels/test_flash_attention.py::test_single_query", "['args'][2]",
     "attention over one key returns that key's value row"),
    ("context_parallel/test_blocks.py::test_attention_large_scores", "['attn']['calls'][5][2]",
     "with scores this large each query sees one key: its output is that key's value row"),
    ("context_parallel/test_zigzag.py::test_zigzag_unsplit_round_trip", "['unsplit']['calls']",
     "zigzag_unsplit puts the shards it is given back in order: with one rank, its one shard "
     "holds every value of the result"),
    ("triton_kernels/test_paged_decode.py::test_length_one", "['args'][2]",
     "attention over one cached token returns its value row"),
    ("nd_parallel/test_public.py::test_shard_params_like_megatron", "args[0]",
     "shard_params returns slices of the dense parameters it was given"),
    ("nd_parallel/test_shard.py::test_shard_params_cuts_like_megatron", "['params']",
     "shard_params returns slices of the dense parameters it was given"),
    ("rlhf_system/test_public.py::test_sync_bit_identical", "args[0]",
     "after a weight sync the receiver holds exactly the sender's state, which it was given"),
    ("rlhf_system/test_public.py::test_shard_for_tp", "args[0]",
     "a tensor-parallel slice is cut from the full weights the rank was given"),
    ("rlhf_system/test_sync.py::test_sync_", "['state",
     "after a weight sync each receiver holds exactly the sender's state (or its TP slice)"),
    ("rlhf_system/test_sync.py::test_shard_for_tp_slices", "args[0]",
     "a tensor-parallel slice is cut from the full weights the rank was given"),
    ("rlhf_system/test_flow.py::test_ppo_train_step_actor_and_critic", "['critic']",
     "with advantage 'grpo' the critic the rank was given must come back untouched"),
    ("rlhf_system/test_flow.py::test_ppo_train_step_actor_and_critic", "['logit_bias']",
     "the actor's logit_bias is a buffer, not trained: it comes back as the rank was given it"),
)


def is_echo(test: str, sent: str, echoes: tuple[tuple[str, str, str], ...] = ECHO_CHECKS) -> bool:
    """Whether the finding (test node id, path of the sent argument) is a declared echo. The
    implementation parameter of a multi-implementation session (`impl=...`) is not part of the
    test's name here."""
    import re

    test = re.sub(r"\[impl=[^\]-]*\]|impl=[^\]-]*-", "", test)
    return any(name in test and part in sent for name, part, _ in echoes)

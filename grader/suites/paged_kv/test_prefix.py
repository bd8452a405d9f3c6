"""PrefixCachingAllocator: whole-prefix hits, no partial reuse, LRU eviction, collisions, sharing.

Hand-written sequences are judged by the reference model (`_model.py`), which knows the exact
prefix each cached block holds, the order cached free blocks became free, and which blocks the
implementation may hand out (uncached first, then least recently used). Two checks need more
than the model: a forged hash collision (the test overrides `hash_block`, as the stub allows)
and 100 requests that share a 512-token prompt.
"""

from __future__ import annotations

import pytest

from grader.suites.paged_kv._cases import job_tests


def chunk(i: int, block_size: int) -> list[int]:
    """The tokens of one full block; the same whatever its position in a prompt."""
    return [100 * (i + 1) + j for j in range(block_size)]


def c4(*ids: int) -> list[int]:
    return [t for i in ids for t in chunk(i, 4)]


def c2(*ids: int) -> list[int]:
    return [t for i in ids for t in chunk(i, 2)]


HITS = {"name": "hits", "num_blocks": 16, "block_size": 4, "prefix": True}
HITS_OPS = [
    ("prompt", 0, c4(0, 1, 2) + [7]),     # empty cache: nothing hits; 3 full blocks registered
    ("prompt", 1, c4(0, 1, 3) + [8, 9]),  # 2 blocks hit while in use by sequence 0
    ("prompt", 2, c4(4, 1, 2) + [7]),     # block 1 has the same tokens after another prefix: miss
    ("prompt", 3, c4(0, 4)),              # block 0 hits; block 1 is the last: computed
    ("prompt", 6, c4(4, 1, 2) + [5]),     # sequence 2's blocks, not sequence 0's block 1
    ("free", 0), ("free", 1),
    ("prompt", 4, c4(0, 1, 2) + [7]),     # all 3 full blocks hit, two of them revived
    ("prompt", 5, c4(0, 1, 3) + [1]),     # sequence 1's third block is still cached
    ("free", 2), ("free", 3), ("free", 4), ("free", 5), ("free", 6),
]

PARTIAL = {"name": "partial", "num_blocks": 8, "block_size": 4, "prefix": True}
PARTIAL_OPS = [
    ("prompt", 0, c4(0) + [7]), ("free", 0),
    ("prompt", 1, c4(0) + [7]),           # 4 cached: the partial block is never reused
    ("prompt", 2, c4(0) + [7]),
    ("prompt", 7, []), ("prompt", 1, [1, 2]),  # ValueError: empty, existing id
    ("append", 1), ("append", 2),         # the partial blocks are private: no copy
    ("prompt", 3, c4(1, 2)), ("free", 3),
    ("prompt", 4, c4(1, 2)),              # all cached, but the last block is recomputed
    ("prompt", 5, c4(1, 2) + [5]),        # now both full blocks may hit
    ("prompt", 6, [3]),                   # a one-token prompt: fills the pool
    ("free", 1), ("free", 2), ("free", 4), ("free", 5), ("free", 6),
]

LRU = {"name": "lru", "num_blocks": 8, "block_size": 2, "prefix": True}
LRU_OPS = [
    ("prompt", 0, c2(0) + [7]), ("prompt", 1, c2(1) + [7]), ("prompt", 2, c2(2) + [7]),
    ("free", 0), ("free", 2), ("free", 1),  # cached and free, least recent first: 0, 2, 1
    ("allocate", 3, 10),                  # takes exactly the 5 uncached free blocks
    ("prompt", 4, c2(2) + [7]),           # revives chunk 2's block; evicts chunk 0's
    ("free", 4),                          # chunk 2's block is now the most recent
    ("prompt", 5, c2(0) + [7]),           # evicted: a miss; evicts chunk 1's block
    ("prompt", 6, c2(2) + [7]),           # its one fresh block does not fit once the hit is
    ("free", 3),                          # revived: OutOfBlocks; then room again
    ("prompt", 6, c2(2) + [7]),
    ("prompt", 7, c2(3, 4, 5) + [7]), ("free", 7),  # released last block first
    ("allocate", 8, 4),                   # evicts the (3, 4, 5) block, not the (3) block
    ("free", 8),
    ("prompt", 9, c2(3, 4, 5) + [7]),     # (3) and (3, 4) still hit
    ("free", 5), ("free", 6), ("free", 9),
]

JOBS = {"hits": (HITS, [HITS_OPS]), "partial": (PARTIAL, [PARTIAL_OPS]),
        "lru": (LRU, [LRU_OPS])}


PREFIX = job_tests(JOBS)
case_runs = PREFIX.fixture

test_hits_only_on_whole_matching_prefixes = PREFIX.test(4, "hits")
test_partial_blocks_are_not_reused_and_one_token_is_left = PREFIX.test(3, "partial")
test_eviction_uncached_first_then_least_recently_used = PREFIX.test(5, "lru")


# -- a forged collision ----------------------------------------------------------------------
COLLIDE_A = c4(0, 1) + [7]
COLLIDE_B = c4(2, 1) + [8]  # block 0 forged to hash like A's block 0; block 1 equals A's


def rank_forged_collision(ctx, a_tokens, b_tokens):
    """Prompt A, then B whose first block's hash is forged to equal A's first block's hash.

    Also returns every `hash_block` call as (parent_hash, token_ids, the hash it returned),
    each argument as plain data (its repr when it is neither None, an int nor a sequence)."""
    mod = ctx.impl_module("paged_kv", "allocator")
    a_first, b_first = tuple(a_tokens[:4]), tuple(b_tokens[:4])
    calls = []

    def as_data(value):
        if value is None or isinstance(value, int):
            return value
        try:
            return [int(t) for t in value]
        except (TypeError, ValueError):
            return repr(value)[:80]

    class Forged(mod.PrefixCachingAllocator):
        def hash_block(self, parent_hash, token_ids):
            forged = token_ids
            if parent_hash is None and as_data(token_ids) == list(b_first):
                forged = a_first
            result = super().hash_block(parent_hash, forged)
            calls.append([as_data(parent_hash), as_data(token_ids), as_data(result)])
            return result

    alloc = Forged(12, 4)
    table_a, cached_a = alloc.allocate_prompt(0, a_tokens)
    table_b, cached_b = alloc.allocate_prompt(1, b_tokens)
    alloc.free(1)
    table_a2, cached_a2 = alloc.allocate_prompt(2, a_tokens)
    alloc.free(0)
    alloc.free(2)
    return {"a": (list(table_a), int(cached_a)), "b": (list(table_b), int(cached_b)),
            "a2": (list(table_a2), int(cached_a2)), "free": int(alloc.num_free_blocks),
            "hash_calls": calls}


@pytest.fixture(scope="module")
def forged(launch):
    return launch(rank_forged_collision, world_size=1, args=(COLLIDE_A, COLLIDE_B),
                  timeout=60).values[0]


@pytest.mark.exercises("PrefixCachingAllocator")
@pytest.mark.points(2)
def test_forged_hash_collision_is_not_a_hit(forged):
    table_a, _ = forged["a"]
    table_b, cached_b = forged["b"]
    assert cached_b == 0, (
        f"a prompt whose first block's hash collides with a cached block's hash (different "
        f"tokens) reported {cached_b} cached tokens, expected 0; compare the token ids on a hash "
        f"hit, and stop at the first miss")
    shared = sorted(set(table_a) & set(table_b))
    assert not shared, (f"the colliding prompt shares blocks {shared} with the cached prompt; "
                        f"a hash collision must not reuse a block")
    table_a2, cached_a2 = forged["a2"]
    assert (cached_a2, table_a2[:2]) == (8, table_a[:2]), (
        f"after the collision the original prompt reported {cached_a2} cached tokens (blocks "
        f"{table_a2[:2]}), expected 8 (its blocks {table_a[:2]}); a colliding prompt must not "
        f"take over the cached entry")
    assert forged["free"] == 12, f"{forged['free']} of 12 blocks free after freeing everything"


@pytest.mark.exercises("PrefixCachingAllocator")
@pytest.mark.points(1)
def test_hash_block_gets_the_previous_hash_then_the_block_tokens(forged):
    """hash_block(parent_hash, token_ids): None or an earlier hash, then block_size token ids
    that are a full block of the prompt (seen through the same overriding subclass)."""
    blocks = {tuple(p[i:i + 4]) for p in (COLLIDE_A, COLLIDE_B) for i in range(0, len(p) - 3, 4)}
    returned: list = []
    for parent, tokens, result in forged["hash_calls"]:
        assert parent is None or parent in returned, (
            "hash_block was called with a parent_hash that is neither None nor a hash it "
            "returned before; call self.hash_block(previous block's hash (None for block 0), "
            "this block's token ids), in that order")
        assert isinstance(tokens, list) and tuple(tokens) in blocks, (
            "hash_block was called with token_ids that are not the block_size token ids of a "
            "full block of the prompt; call self.hash_block(previous block's hash, this "
            "block's token ids), in that order")
        returned.append(result)
    assert forged["hash_calls"], ("allocate_prompt never called self.hash_block; compute every "
                                  "block's hash through it (the tests override it)")


# -- 100 requests sharing a 512-token prompt ---------------------------------------------------
SHARED_PROMPT = 512
REQUESTS = 100
BLOCK = 16
POOL = 200


def rank_shared_prompt(ctx, num_requests, prompt_len, block_size, num_blocks):
    mod = ctx.impl_module("paged_kv", "allocator")
    alloc = mod.PrefixCachingAllocator(num_blocks, block_size)
    prompt = list(range(1000, 1000 + prompt_len))
    cached, prefixes = [], set()
    for r in range(num_requests):
        table, num_cached = alloc.allocate_prompt(r, prompt + [5000 + r, 7, 9])
        cached.append(int(num_cached))
        prefixes.add(tuple(table[:prompt_len // block_size]))
    in_use = num_blocks - int(alloc.num_free_blocks)
    for r in range(num_requests):
        alloc.free(r)
    return {"cached": cached, "distinct_prefixes": len(prefixes), "in_use": in_use,
            "free_after": int(alloc.num_free_blocks)}


@pytest.fixture(scope="module")
def shared(launch):
    return launch(rank_shared_prompt, world_size=1,
                  args=(REQUESTS, SHARED_PROMPT, BLOCK, POOL), timeout=60).values[0]


@pytest.mark.exercises("PrefixCachingAllocator")
@pytest.mark.points(3)
def test_hundred_requests_share_one_copy_of_the_prompt(shared):
    prompt_blocks = SHARED_PROMPT // BLOCK
    expected_cached = [0] + [SHARED_PROMPT] * (REQUESTS - 1)
    assert shared["cached"] == expected_cached, (
        f"{REQUESTS} requests sharing a {SHARED_PROMPT}-token prompt: cached tokens per request "
        f"should be 0 for the first and {SHARED_PROMPT} for the rest; got "
        f"{sorted(set(shared['cached']))} (distinct values)")
    expected = prompt_blocks + REQUESTS  # one copy of the prompt + each request's own tail
    assert shared["in_use"] == expected and shared["distinct_prefixes"] == 1, (
        f"{REQUESTS} requests sharing a {SHARED_PROMPT}-token prompt hold {shared['in_use']} "
        f"blocks, expected {expected} (one copy of the prompt's {prompt_blocks} blocks plus one "
        f"block each); without sharing it would be {REQUESTS * (prompt_blocks + 1)}")
    assert shared["free_after"] == POOL, (
        f"{shared['free_after']} of {POOL} blocks free after freeing every request")

"""Paged KV-cache block allocator: block tables, forking, copy-on-write and prefix caching.

You implement `BlockAllocator` (README §3–§4) and `PrefixCachingAllocator` (README §5). The
allocator only does bookkeeping with integers; the tensors live in `cache.py`.

Vocabulary used below:
- the *pool*: `num_blocks` physical blocks with ids `0 .. num_blocks - 1`, each holding
  `block_size` token slots;
- a sequence's *block table*: the list of physical block ids holding its tokens in order;
  token position p lives in physical *slot* `table[p // block_size] * block_size +
  p % block_size`;
- a block's *reference count*: how many live block tables contain it. A block is *free* when
  its count is 0.

Sequence ids are any hashable values (the tests use ints). Errors, everywhere:
- an unknown sequence id: `KeyError`;
- a sequence id that already exists where a new one is expected: `ValueError`;
- a negative token count: `ValueError`;
- too few free blocks: `OutOfBlocks`, and then *nothing* has changed (atomic).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence


class OutOfBlocks(RuntimeError):
    """The pool has too few free blocks for the request; the allocator is left unchanged."""


class BlockAllocator:
    """A pool of `num_blocks` blocks of `block_size` token slots, shared by sequences.

    Attributes (read-only): `num_blocks`, `block_size`.

    Invariants the tests check after every operation:
    - `num_free_blocks` + (distinct blocks in live block tables) == `num_blocks`;
    - a block's reference count equals its occurrences across live block tables;
    - a live sequence of n tokens holds exactly ceil(n / block_size) blocks (waste < 1 block);
    - `append_slot` never returns a slot inside a block that another live sequence holds.
    Which free block id you hand out is your choice (unless `PrefixCachingAllocator` says
    otherwise); the tests accept any free block.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        """Create the pool with every block free and no sequences.

        Raises ValueError when `num_blocks` or `block_size` is < 1.
        """
        raise NotImplementedError("BlockAllocator.__init__: see README §3")

    @property
    def num_free_blocks(self) -> int:
        """Blocks with reference count 0 (for `PrefixCachingAllocator`: including cached ones
        that could be evicted)."""
        raise NotImplementedError("BlockAllocator.num_free_blocks: see README §3")

    def can_allocate(self, num_tokens: int) -> bool:
        """Whether `allocate(new_id, num_tokens)` would succeed now (ceil(num_tokens /
        block_size) <= num_free_blocks). Changes nothing. ValueError if num_tokens < 0."""
        raise NotImplementedError("BlockAllocator.can_allocate: see README §3")

    def allocate(self, seq_id: Hashable, num_tokens: int) -> list[int]:
        """Register a new sequence that already holds `num_tokens` tokens; return its block table.

        Takes ceil(num_tokens / block_size) free blocks (none for 0 tokens) with reference
        count 1. Returns a new list (changing it does not change the allocator).
        Raises ValueError (seq_id exists, or num_tokens < 0) or OutOfBlocks (too few free
        blocks: then no block is taken and no sequence is created).
        """
        raise NotImplementedError("BlockAllocator.allocate: see README §3")

    def append_slot(self, seq_id: Hashable) -> int:
        """Make room for the sequence's next token; return that token's physical slot.

        With n tokens so far, the new token is position n. If n is a multiple of block_size
        (no block yet, or the last block is full), a free block is appended to the table.
        Otherwise the token goes into the last block at offset n % block_size — but if that
        block is shared (reference count > 1), the sequence first gets a fresh block in its
        place, the shared block's count drops by one, and the pair (shared block, fresh block)
        is recorded for `pop_copies` (copy-on-write). The sequence's length becomes n + 1.
        Raises KeyError (unknown seq_id) or OutOfBlocks (a block is needed and none is free:
        then nothing changes, the length included).
        """
        raise NotImplementedError("BlockAllocator.append_slot: see README §4")

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        """Create `child_id` as a copy of `parent_id` that shares every block.

        The child's table equals the parent's, its length equals the parent's, and each of
        those blocks' reference count goes up by one. Allocates nothing, so it never raises
        OutOfBlocks. Raises KeyError (unknown parent) or ValueError (child_id exists).
        """
        raise NotImplementedError("BlockAllocator.fork: see README §4")

    def free(self, seq_id: Hashable) -> None:
        """Forget the sequence; each of its blocks' reference count drops by one.

        Blocks whose count reaches 0 become free. They are released in reverse table order
        (last block first), which decides eviction order in `PrefixCachingAllocator`.
        Raises KeyError for an unknown seq_id.
        """
        raise NotImplementedError("BlockAllocator.free: see README §3")

    def block_table(self, seq_id: Hashable) -> list[int]:
        """The sequence's block ids in order, as a new list. KeyError if unknown."""
        raise NotImplementedError("BlockAllocator.block_table: see README §3")

    def seq_len(self, seq_id: Hashable) -> int:
        """The number of tokens the sequence holds. KeyError if unknown."""
        raise NotImplementedError("BlockAllocator.seq_len: see README §3")

    def slot_mapping(self, seq_id: Hashable) -> list[int]:
        """Physical slot of every token position 0 .. seq_len - 1. KeyError if unknown."""
        raise NotImplementedError("BlockAllocator.slot_mapping: see README §3")

    def pop_copies(self) -> list[tuple[int, int]]:
        """The (src_block, dst_block) copies owed since the last call, in the order they arose;
        clears the list.

        The caller applies them with `cache.copy_blocks` before writing any new token.
        """
        raise NotImplementedError("BlockAllocator.pop_copies: see README §4")


class PrefixCachingAllocator(BlockAllocator):
    """A `BlockAllocator` that reuses cached blocks of earlier prompts with the same prefix.

    Hashing. A *full* block i of a prompt (all block_size tokens known) is identified by
    `h_i = self.hash_block(h_{i-1}, tokens_of_block_i)` with `h_{-1} = None`: the hash chains
    the whole prefix, so block i of two prompts match only when blocks 0..i all match. Always
    compute hashes by calling `self.hash_block` (tests override it to forge collisions), and
    on a hash match compare the cached block's token ids with the prompt's: different tokens
    are a miss. Partial blocks are never hashed, cached or reused.

    Which blocks are cached. `allocate_prompt` registers every full block of the prompt that
    it had to allocate, under that block's hash — unless the hash is already cached, in which
    case the existing block keeps the entry. Blocks filled later by `append_slot`, and blocks
    from `allocate`, are never cached. A cached block stays cached while in use and after its
    count drops to 0 (it is then free but *cached*), until it is evicted.

    Eviction. Whenever a fresh block is needed (`allocate`, `append_slot`, copy-on-write,
    `allocate_prompt`), take a free block that is not cached if there is one; only when none
    is left, evict the cached free block that became free the longest time ago (least
    recently used; `free` releases blocks last block first). An evicted block is no longer
    cached. A cached free block that is hit again is in use again: no longer free, so it can
    no longer be evicted.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        """An empty pool and an empty prefix cache. ValueError as in BlockAllocator."""
        raise NotImplementedError("PrefixCachingAllocator.__init__: see README §5")

    def hash_block(self, parent_hash: int | None, token_ids: tuple[int, ...]) -> int:
        """Hash of a full block: `parent_hash` is the previous block's hash (None for block 0)
        and `token_ids` the block's block_size token ids. E.g. `hash((parent_hash, token_ids))`.
        """
        raise NotImplementedError("PrefixCachingAllocator.hash_block: see README §5")

    def allocate_prompt(self, seq_id: Hashable, token_ids: Sequence[int]) -> tuple[list[int],
                                                                                   int]:
        """Register a new sequence holding the prompt `token_ids`; reuse its cached prefix.

        Look up full blocks 0, 1, ... of the prompt in order and stop at the first miss; only
        the first (len(token_ids) - 1) // block_size blocks may hit, so at least one token is
        always left to compute (a prompt that is all cached recomputes its last block). Hit
        blocks are shared (count + 1, revived if free); the remaining
        ceil(len / block_size) - hits blocks are fresh. Returns (block table, number of cached
        tokens = hits * block_size); the sequence's length is len(token_ids).
        Raises ValueError (seq_id exists, or empty prompt) or OutOfBlocks (the fresh blocks do
        not fit in the free blocks left after reviving the hits: then nothing changes).
        """
        raise NotImplementedError("PrefixCachingAllocator.allocate_prompt: see README §5")

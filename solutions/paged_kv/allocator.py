"""Paged KV-cache block allocator: block tables, forking, copy-on-write and prefix caching.

Reference solution. The KV cache is a pool of `num_blocks` fixed-size blocks of `block_size`
token slots; a sequence owns a *block table* (logical block i -> physical block id), so its
memory grows one block at a time instead of being reserved for the maximum length (vLLM's
PagedAttention, Kwon et al. 2023, §4). Blocks carry reference counts so that forked sequences
share their prefix and copy a block only when they are about to write into a shared one.

Slot numbering: token position p of a sequence lives in physical slot
`table[p // block_size] * block_size + p % block_size` (README §3).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence


class OutOfBlocks(RuntimeError):
    """The pool has too few free blocks for the request; the allocator is left unchanged."""


class BlockAllocator:
    """A pool of `num_blocks` blocks of `block_size` token slots, shared by sequences.

    See the stub (assignments/paged_kv/allocator.py) for the full contract.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1, got {num_blocks} and "
                             f"{block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        # A stack of free block ids, lowest id on top (any order would be correct).
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))
        self._ref = [0] * num_blocks
        self._tables: dict[Hashable, list[int]] = {}
        self._lens: dict[Hashable, int] = {}
        self._copies: list[tuple[int, int]] = []

    # -- queries ---------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return self._num_free()

    def can_allocate(self, num_tokens: int) -> bool:
        _check_count(num_tokens)
        return self._blocks_for(num_tokens) <= self.num_free_blocks

    def block_table(self, seq_id: Hashable) -> list[int]:
        return list(self._table(seq_id))

    def seq_len(self, seq_id: Hashable) -> int:
        self._table(seq_id)
        return self._lens[seq_id]

    def slot_mapping(self, seq_id: Hashable) -> list[int]:
        table, bs = self._table(seq_id), self.block_size
        return [table[p // bs] * bs + p % bs for p in range(self._lens[seq_id])]

    # -- sequence lifecycle ----------------------------------------------------------------
    def allocate(self, seq_id: Hashable, num_tokens: int) -> list[int]:
        self._check_new(seq_id)
        _check_count(num_tokens)
        needed = self._blocks_for(num_tokens)
        # Check before taking anything: a failed request must leave the pool as it was.
        self._ensure_free(needed, f"allocate({seq_id!r}, {num_tokens})")
        table = [self._take_block() for _ in range(needed)]
        self._tables[seq_id] = table
        self._lens[seq_id] = num_tokens
        return list(table)

    def append_slot(self, seq_id: Hashable) -> int:
        table = self._table(seq_id)
        length = self._lens[seq_id]
        offset = length % self.block_size
        if offset == 0:
            # No block yet, or the last one is full: the new token starts a fresh block.
            self._ensure_free(1, f"append_slot({seq_id!r})")
            table.append(self._take_block())
        elif self._ref[table[-1]] > 1:
            # The last block is shared with a fork: writing into it would change the other
            # sequences' cache, so this sequence gets its own copy first (copy-on-write).
            self._ensure_free(1, f"append_slot({seq_id!r}) (copy-on-write)")
            src = table[-1]
            dst = self._take_block()
            self._ref[src] -= 1
            table[-1] = dst
            self._copies.append((src, dst))
        self._lens[seq_id] = length + 1
        return table[-1] * self.block_size + offset

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        parent = self._table(parent_id)
        self._check_new(child_id)
        for block in parent:
            self._ref[block] += 1
        self._tables[child_id] = list(parent)
        self._lens[child_id] = self._lens[parent_id]

    def free(self, seq_id: Hashable) -> None:
        table = self._table(seq_id)
        del self._tables[seq_id], self._lens[seq_id]
        # Last block first, so that with prefix caching a sequence's tail is evicted before
        # the prefix it shares with others.
        for block in reversed(table):
            self._ref[block] -= 1
            if self._ref[block] == 0:
                self._release_block(block)

    def pop_copies(self) -> list[tuple[int, int]]:
        copies, self._copies = self._copies, []
        return copies

    # -- the pool (overridden by PrefixCachingAllocator) -----------------------------------
    def _num_free(self) -> int:
        return len(self._free)

    def _take_block(self) -> int:
        block = self._free.pop()
        self._ref[block] = 1
        return block

    def _release_block(self, block: int) -> None:
        self._free.append(block)

    # -- helpers ---------------------------------------------------------------------------
    def _blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _ensure_free(self, needed: int, what: str) -> None:
        if needed > self.num_free_blocks:
            raise OutOfBlocks(f"{what} needs {needed} block(s), {self.num_free_blocks} of "
                              f"{self.num_blocks} free")

    def _table(self, seq_id: Hashable) -> list[int]:
        try:
            return self._tables[seq_id]
        except KeyError:
            raise KeyError(f"unknown sequence {seq_id!r}") from None

    def _check_new(self, seq_id: Hashable) -> None:
        if seq_id in self._tables:
            raise ValueError(f"sequence {seq_id!r} already exists; free it first")


class PrefixCachingAllocator(BlockAllocator):
    """A `BlockAllocator` that reuses the blocks of earlier prompts with the same prefix.

    Every full block of a prompt is registered under a chained hash of (hash of the previous
    block, this block's token ids), so equal hashes mean equal whole prefixes (up to hash
    collisions, which a token comparison catches for the block itself). Freed registered
    blocks stay cached, evictable least recently used first, until the pool needs them.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        super().__init__(num_blocks, block_size)
        self._cached: dict[int, int] = {}  # hash -> block holding that prefix
        self._block_hash: dict[int, int] = {}  # block -> its hash, for cached blocks only
        self._block_tokens: dict[int, tuple[int, ...]] = {}  # cached block -> its token ids
        # Cached blocks with reference count 0, least recently released first.
        self._evictable: OrderedDict[int, None] = OrderedDict()

    def hash_block(self, parent_hash: int | None, token_ids: tuple[int, ...]) -> int:
        return hash((parent_hash, token_ids))

    def allocate_prompt(self, seq_id: Hashable, token_ids: Sequence[int]) -> tuple[list[int],
                                                                                   int]:
        self._check_new(seq_id)
        tokens = [int(t) for t in token_ids]
        if not tokens:
            raise ValueError(f"allocate_prompt({seq_id!r}): a prompt needs at least one token")
        bs = self.block_size
        blocks = [tuple(tokens[i:i + bs]) for i in range(0, len(tokens), bs)]
        hashes, parent = [], None
        for block_tokens in blocks:
            if len(block_tokens) < bs:
                break  # a partial block is never hashed: its content is still growing
            parent = self.hash_block(parent, block_tokens)
            hashes.append(parent)

        # Longest run of leading cached blocks, stopping short of the last token: the caller
        # must compute at least one token to get the logits of the next one.
        hits: list[int] = []
        for i in range((len(tokens) - 1) // bs):
            block = self._cached.get(hashes[i])
            if block is None or self._block_tokens[block] != blocks[i]:
                break  # a miss, or a hash collision with another prefix
            hits.append(block)

        needed = len(blocks) - len(hits)
        revived = sum(1 for block in hits if self._ref[block] == 0)
        if needed > self.num_free_blocks - revived:
            raise OutOfBlocks(f"allocate_prompt({seq_id!r}) of {len(tokens)} tokens needs "
                              f"{needed} new block(s) ({len(hits)} cached), "
                              f"{self.num_free_blocks - revived} free")
        for block in hits:
            if self._ref[block] == 0:
                del self._evictable[block]  # revived: no longer free, so never evicted
            self._ref[block] += 1
        table = hits + [self._take_block() for _ in range(needed)]
        for i in range(len(hits), len(hashes)):
            if hashes[i] not in self._cached:  # the first block with a prefix keeps the entry
                self._cached[hashes[i]] = table[i]
                self._block_hash[table[i]] = hashes[i]
                self._block_tokens[table[i]] = blocks[i]
        self._tables[seq_id] = table
        self._lens[seq_id] = len(tokens)
        return list(table), len(hits) * bs

    def _num_free(self) -> int:
        return len(self._free) + len(self._evictable)

    def _take_block(self) -> int:
        if self._free:
            return super()._take_block()
        # Only when no uncached block is left: evict the least recently released cached one.
        block, _ = self._evictable.popitem(last=False)
        del self._cached[self._block_hash.pop(block)]
        del self._block_tokens[block]
        self._ref[block] = 1
        return block

    def _release_block(self, block: int) -> None:
        if block in self._block_hash:
            self._evictable[block] = None
        else:
            self._free.append(block)


def _check_count(num_tokens: int) -> None:
    if num_tokens < 0:
        raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")

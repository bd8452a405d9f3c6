"""An independent paged_kv allocator, written from the stub's docstrings and README only.

Free blocks live in two ordered pools: plain ones, and cached ones in the order they became
free (the least recently freed is evicted first). The prefix cache maps a block hash to its
block and remembers each cached block's hash and tokens, so an eviction removes exactly its
own entry.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence


class OutOfBlocks(RuntimeError):
    """The pool has too few free blocks for the request; the allocator is left unchanged."""


def _blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


class BlockAllocator:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1, got {num_blocks}, "
                             f"{block_size}")
        self._num_blocks, self._block_size = num_blocks, block_size
        self._refs = [0] * num_blocks
        self._plain: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        self._cached_free: OrderedDict[int, None] = OrderedDict()  # oldest first
        self._tables: dict[Hashable, list[int]] = {}
        self._lengths: dict[Hashable, int] = {}
        self._owed: list[tuple[int, int]] = []

    @property
    def num_blocks(self) -> int:
        return self._num_blocks

    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def num_free_blocks(self) -> int:
        return len(self._plain) + len(self._cached_free)

    # -- pool -------------------------------------------------------------------------------
    def _is_cached(self, block: int) -> bool:
        return False

    def _forget(self, block: int) -> None:
        """Drop a cached block's prefix-cache entry (when it is evicted)."""

    def _take(self) -> int:
        if self._plain:
            block, _ = self._plain.popitem(last=False)
        elif self._cached_free:
            block, _ = self._cached_free.popitem(last=False)
            self._forget(block)
        else:
            raise OutOfBlocks("no free block left")
        self._refs[block] = 1
        return block

    def _release(self, block: int) -> None:
        self._refs[block] -= 1
        if self._refs[block] == 0:
            (self._cached_free if self._is_cached(block) else self._plain)[block] = None

    def _known(self, seq_id: Hashable) -> None:
        if seq_id not in self._tables:
            raise KeyError(seq_id)

    def _new_id(self, seq_id: Hashable) -> None:
        if seq_id in self._tables:
            raise ValueError(f"sequence {seq_id!r} already exists")

    # -- API --------------------------------------------------------------------------------
    def can_allocate(self, num_tokens: int) -> bool:
        if num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
        return _blocks_for(num_tokens, self._block_size) <= self.num_free_blocks

    def allocate(self, seq_id: Hashable, num_tokens: int) -> list[int]:
        self._new_id(seq_id)
        if not self.can_allocate(num_tokens):
            raise OutOfBlocks(f"{_blocks_for(num_tokens, self._block_size)} blocks needed, "
                              f"{self.num_free_blocks} free")
        table = [self._take() for _ in range(_blocks_for(num_tokens, self._block_size))]
        self._tables[seq_id], self._lengths[seq_id] = table, num_tokens
        return list(table)

    def append_slot(self, seq_id: Hashable) -> int:
        self._known(seq_id)
        table, position = self._tables[seq_id], self._lengths[seq_id]
        offset = position % self._block_size
        if offset == 0:
            table.append(self._take())
        elif self._refs[table[-1]] > 1:
            fresh = self._take()
            shared, table[-1] = table[-1], fresh
            self._refs[shared] -= 1
            self._owed.append((shared, fresh))
        self._lengths[seq_id] = position + 1
        return table[position // self._block_size] * self._block_size + offset

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        self._known(parent_id)
        self._new_id(child_id)
        table = list(self._tables[parent_id])
        for block in table:
            self._refs[block] += 1
        self._tables[child_id], self._lengths[child_id] = table, self._lengths[parent_id]

    def free(self, seq_id: Hashable) -> None:
        self._known(seq_id)
        table = self._tables.pop(seq_id)
        del self._lengths[seq_id]
        for block in reversed(table):
            self._release(block)

    def block_table(self, seq_id: Hashable) -> list[int]:
        self._known(seq_id)
        return list(self._tables[seq_id])

    def seq_len(self, seq_id: Hashable) -> int:
        self._known(seq_id)
        return self._lengths[seq_id]

    def slot_mapping(self, seq_id: Hashable) -> list[int]:
        self._known(seq_id)
        table, size = self._tables[seq_id], self._block_size
        return [table[p // size] * size + p % size for p in range(self._lengths[seq_id])]

    def pop_copies(self) -> list[tuple[int, int]]:
        owed, self._owed = self._owed, []
        return owed


class PrefixCachingAllocator(BlockAllocator):
    def __init__(self, num_blocks: int, block_size: int) -> None:
        super().__init__(num_blocks, block_size)
        self._by_hash: dict[int, int] = {}
        self._entry: dict[int, tuple[int, tuple[int, ...]]] = {}  # block -> (hash, tokens)

    def hash_block(self, parent_hash: int | None, token_ids: tuple[int, ...]) -> int:
        return hash(("paged-kv-block", parent_hash, token_ids))

    def _is_cached(self, block: int) -> bool:
        return block in self._entry

    def _forget(self, block: int) -> None:
        key, _ = self._entry.pop(block)
        if self._by_hash.get(key) == block:
            del self._by_hash[key]

    def allocate_prompt(self, seq_id: Hashable, token_ids: Sequence[int]) -> tuple[list[int],
                                                                                   int]:
        self._new_id(seq_id)
        tokens = [int(t) for t in token_ids]
        if not tokens:
            raise ValueError("an empty prompt")
        size = self._block_size
        full = len(tokens) // size
        chunks = [tuple(tokens[i * size:(i + 1) * size]) for i in range(full)]
        hashes: list[int] = []
        parent: int | None = None
        for chunk in chunks:
            parent = self.hash_block(parent, chunk)
            hashes.append(parent)
        hits: list[int] = []
        for i in range((len(tokens) - 1) // size):
            block = self._by_hash.get(hashes[i])
            if block is None or self._entry[block][1] != chunks[i]:
                break
            hits.append(block)
        fresh_needed = _blocks_for(len(tokens), size) - len(hits)
        revived = sum(1 for b in hits if self._refs[b] == 0)
        if fresh_needed > self.num_free_blocks - revived:
            raise OutOfBlocks(f"{fresh_needed} fresh blocks needed, "
                              f"{self.num_free_blocks - revived} free after the hits")
        for block in hits:
            if self._refs[block] == 0:
                del self._cached_free[block]
            self._refs[block] += 1
        table = list(hits)
        for i in range(len(hits), _blocks_for(len(tokens), size)):
            block = self._take()
            table.append(block)
            if i < full and hashes[i] not in self._by_hash:
                self._by_hash[hashes[i]] = block
                self._entry[block] = (hashes[i], chunks[i])
        self._tables[seq_id], self._lengths[seq_id] = table, len(tokens)
        return list(table), len(hits) * size

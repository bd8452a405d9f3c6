"""A reference-counted pool of KV blocks. Provided: do not edit.

One block holds the keys and values of ONE token (a page size of 1, SGLang's default), so a
request of n tokens holds n blocks and a prefix can be shared at any token boundary. Blocks
are reference counted: `allocate` hands out blocks with count 1, `incref` adds an owner (the
radix cache, or a request reusing a cached prefix), `free` drops one owner, and a block whose
count reaches 0 goes back to the free pool.

    manager = BlockManager(64)
    blocks = manager.allocate(5)         # five distinct block ids, each with count 1
    manager.incref(blocks[:3])           # a second owner of the first three
    manager.free(blocks)                 # the last two are free again, the first three not
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

__all__ = ["BlockManager", "OutOfBlocks"]


class OutOfBlocks(RuntimeError):
    """Raised by `BlockManager.allocate` when fewer blocks are free than asked for."""


class BlockManager:
    """`num_blocks` one-token KV blocks with reference counts.

    Free blocks are handed out in first-in first-out order (a freed block goes to the back),
    so which ids come back is deterministic but nothing may depend on it.
    """

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be at least 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self._refs = [0] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))

    def num_free(self) -> int:
        """Blocks with reference count 0."""
        return len(self._free)

    def num_used(self) -> int:
        """Blocks with reference count >= 1."""
        return self.num_blocks - len(self._free)

    def refcount(self, block: int) -> int:
        """How many owners `block` has (0: free)."""
        self._check(block)
        return self._refs[block]

    def allocate(self, n: int) -> list[int]:
        """`n` free blocks (n >= 0), each now with count 1; OutOfBlocks when fewer are free
        (nothing is allocated then)."""
        if n < 0:
            raise ValueError(f"cannot allocate {n} blocks")
        if n > len(self._free):
            raise OutOfBlocks(f"asked for {n} blocks, {len(self._free)} free")
        blocks = [self._free.popleft() for _ in range(n)]
        for b in blocks:
            self._refs[b] = 1
        return blocks

    def incref(self, blocks: Sequence[int]) -> None:
        """One more owner of each block; every block must be in use (count >= 1)."""
        for b in blocks:
            self._check(b)
            if self._refs[b] < 1:
                raise ValueError(f"incref of free block {b}: only a block in use can be shared")
        for b in blocks:
            self._refs[b] += 1

    def free(self, blocks: Sequence[int]) -> None:
        """One owner fewer of each block; a block whose count reaches 0 is free again.
        Freeing a free block raises ValueError (a double free) and changes nothing."""
        counts: dict[int, int] = {}
        for b in blocks:
            self._check(b)
            counts[b] = counts.get(b, 0) + 1
        for b, c in counts.items():
            if self._refs[b] < c:
                raise ValueError(f"double free of block {b} (reference count {self._refs[b]})")
        for b in blocks:
            self._refs[b] -= 1
            if self._refs[b] == 0:
                self._free.append(b)

    def _check(self, block: int) -> None:
        if not isinstance(block, int) or not 0 <= block < self.num_blocks:
            raise ValueError(f"block id {block!r} out of range [0, {self.num_blocks})")

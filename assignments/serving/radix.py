"""The radix cache: shared prompt prefixes skip prefill (README §4).

A radix tree over token ids in the style of SGLang's RadixAttention (Zheng et al., 2024):
every path from the root spells a token sequence whose KV blocks are cached, nodes with a
reference count > 0 are in use by running requests, and unreferenced leaves are evicted
least-recently-used first when the block pool runs short.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["RadixCache"]




class RadixCache:
    """A radix tree over token ids whose nodes hold the KV blocks of their tokens (README §4).

    Structure: every node but the root holds a non-empty run of tokens (its edge) and one
    block per token; the children of a node start with distinct tokens. A walk down the tree
    (by `match_prefix` or `insert`) that stops inside an edge, because the tokens run out or
    the next token differs, splits that node there into an upper node (the tokens walked) and
    a lower node (the rest, with the children); nodes are never merged back. A referenced node
    stays the node its holders reference: the lower part is the node they matched, and the
    upper part gets a copy of its count, so one `dec_ref` of the held node releases both.

    Ownership: the tree holds one reference (`BlockManager.incref`) on every block it stores,
    and drops it (`BlockManager.free`) when it evicts the node.

    Reference counts: `inc_ref(node)` / `dec_ref(node)` add / remove one reference on `node`
    and on every ancestor of it; a node whose count is above 0 is in use and never evicted.

    LRU clock: every `match_prefix` and `insert` call advances a logical clock by one and
    stamps with it every node on the path it walked (after any split, including a leaf it
    adds). `evict` removes the unreferenced leaf with the smallest stamp first.
    """

    def __init__(self, manager: Any) -> None:
        """An empty tree over the blocks of `manager` (an assignments.serving.blocks
        BlockManager)."""
        raise NotImplementedError("RadixCache.__init__: see README §4")



    def match_prefix(self, tokens: Sequence[int]) -> tuple[list[int], Any]:
        """The longest prefix of `tokens` held in the tree: (its blocks, the node where it
        ends). The node is the root when nothing matched (blocks == []); pass it to
        inc_ref / dec_ref. Splits an edge the match stops inside, so the node ends exactly
        at the match. Stamps the path; changes no reference count (of blocks or nodes)."""
        raise NotImplementedError("RadixCache.match_prefix: see README §4")

    def insert(self, tokens: Sequence[int], blocks: Sequence[int]) -> int:
        """Cache `tokens` with their `blocks` (same length, else ValueError).

        Returns how many leading tokens were in the tree already: those keep the tree's
        blocks (the caller's blocks for them are neither taken nor touched). The rest, if any,
        becomes one new leaf holding tokens[n:] and blocks[n:], and the tree increfs those
        blocks. Splits an edge the walk stops inside; stamps the path and the new leaf.
        """
        raise NotImplementedError("RadixCache.insert: see README §4")

    def inc_ref(self, node: Any) -> None:
        """One more reference on `node` and each of its ancestors (the root: no-op)."""
        raise NotImplementedError("RadixCache.inc_ref: see README §4")

    def dec_ref(self, node: Any) -> None:
        """One reference fewer on `node` and each ancestor; RuntimeError below zero."""
        raise NotImplementedError("RadixCache.dec_ref: see README §4")

    def evict(self, num_blocks: int) -> int:
        """Remove unreferenced leaves, least recently stamped first, until at least
        `num_blocks` blocks were removed or no leaf can go; returns the blocks removed.

        A leaf goes whole (so more than asked may go); its parent, once childless and
        unreferenced, becomes a candidate in turn (never the root). The tree drops its
        reference on each removed block."""
        raise NotImplementedError("RadixCache.evict: see README §4")


    def size(self) -> int:
        """Blocks held by the tree (= tokens cached)."""
        raise NotImplementedError("RadixCache.size: see README §4")

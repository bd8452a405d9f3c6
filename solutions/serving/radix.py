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


class _Node:
    """One edge of the tree: `tokens[i]` is cached in `blocks[i]`."""

    __slots__ = ("blocks", "children", "parent", "refs", "stamp", "tokens")

    def __init__(self, tokens: list[int], blocks: list[int], parent: _Node | None,
                 stamp: int) -> None:
        self.tokens, self.blocks, self.parent, self.stamp = tokens, blocks, parent, stamp
        self.children: dict[int, _Node] = {}
        self.refs = 0


class RadixCache:
    """A radix tree over token ids whose nodes hold the KV blocks of their tokens (README §4).

    Structure: every node but the root holds a non-empty run of tokens (its edge) and one
    block per token; the children of a node start with distinct tokens. A walk down the tree
    (by `match_prefix` or `insert`) that stops inside an edge, because the tokens run out or
    the next token differs, splits that node there into an upper node (the tokens walked) and
    a lower node (the rest, with the children); nodes are never merged back.

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
        self.manager = manager
        self.clock = 0
        self.root = _Node([], [], None, 0)
        self._size = 0

    def _walk(self, tokens: Sequence[int]) -> tuple[_Node, int]:
        """Follow `tokens` from the root, splitting where the walk stops inside an edge.

        Returns the deepest node reached and how many tokens matched; stamps the path."""
        self.clock += 1
        node, matched = self.root, 0
        node.stamp = self.clock
        while matched < len(tokens):
            child = node.children.get(tokens[matched])
            if child is None:
                break
            common = 0
            edge = child.tokens
            while (common < len(edge) and matched + common < len(tokens)
                   and edge[common] == tokens[matched + common]):
                common += 1
            if common < len(edge):  # stopped inside the edge: split it (README §4, figure)
                child = self._split(child, common)
            child.stamp = self.clock
            node, matched = child, matched + common
            if common < len(edge):
                break
        return node, matched

    def _split(self, node: _Node, at: int) -> _Node:
        """Cut `node` after `at` tokens; returns the new upper node (which keeps the parent's
        edge to it and the lock count, since every request locking the lower part locks it)."""
        parent = node.parent
        assert parent is not None
        upper = _Node(node.tokens[:at], node.blocks[:at], parent, node.stamp)
        upper.refs = node.refs
        parent.children[upper.tokens[0]] = upper
        node.tokens, node.blocks, node.parent = node.tokens[at:], node.blocks[at:], upper
        upper.children[node.tokens[0]] = node
        return upper

    def match_prefix(self, tokens: Sequence[int]) -> tuple[list[int], Any]:
        """The longest prefix of `tokens` held in the tree: (its blocks, the node where it
        ends). The node is the root when nothing matched (blocks == []); pass it to
        inc_ref / dec_ref. Splits an edge the match stops inside, so the node ends exactly
        at the match. Stamps the path; changes no reference count (of blocks or nodes)."""
        node, _ = self._walk(tokens)
        parts, walk = [], node
        while walk is not self.root:
            parts.append(walk.blocks)
            walk = walk.parent
        return [b for part in reversed(parts) for b in part], node

    def insert(self, tokens: Sequence[int], blocks: Sequence[int]) -> int:
        """Cache `tokens` with their `blocks` (same length, else ValueError).

        Returns how many leading tokens were in the tree already: those keep the tree's
        blocks (the caller's blocks for them are neither taken nor touched). The rest, if any,
        becomes one new leaf holding tokens[n:] and blocks[n:], and the tree increfs those
        blocks. Splits an edge the walk stops inside; stamps the path and the new leaf.
        """
        if len(tokens) != len(blocks):
            raise ValueError(f"insert: {len(tokens)} tokens but {len(blocks)} blocks")
        node, matched = self._walk(tokens)
        if matched < len(tokens):
            leaf = _Node(list(tokens[matched:]), list(blocks[matched:]), node, self.clock)
            node.children[leaf.tokens[0]] = leaf
            self.manager.incref(leaf.blocks)
            self._size += len(leaf.blocks)
        return matched

    def inc_ref(self, node: Any) -> None:
        """One more reference on `node` and each of its ancestors (the root: no-op)."""
        while node is not None and node is not self.root:
            node.refs += 1
            node = node.parent

    def dec_ref(self, node: Any) -> None:
        """One reference fewer on `node` and each ancestor; RuntimeError below zero."""
        walk = node
        while walk is not None and walk is not self.root:
            if walk.refs < 1:
                raise RuntimeError("dec_ref of a radix node nobody references")
            walk = walk.parent
        while node is not None and node is not self.root:
            node.refs -= 1
            node = node.parent

    def evict(self, num_blocks: int) -> int:
        """Remove unreferenced leaves, least recently stamped first, until at least
        `num_blocks` blocks were removed or no leaf can go; returns the blocks removed.

        A leaf goes whole (so more than asked may go); its parent, once childless and
        unreferenced, becomes a candidate in turn (never the root). The tree drops its
        reference on each removed block."""
        removed = 0
        while removed < num_blocks:
            leaves = [n for n in self._nodes() if not n.children and n.refs == 0]
            if not leaves:
                break
            victim = min(leaves, key=lambda n: n.stamp)
            assert victim.parent is not None
            del victim.parent.children[victim.tokens[0]]
            self.manager.free(victim.blocks)
            removed += len(victim.blocks)
            self._size -= len(victim.blocks)
        return removed

    def _nodes(self) -> list[_Node]:
        out, todo = [], list(self.root.children.values())
        while todo:
            node = todo.pop()
            out.append(node)
            todo.extend(node.children.values())
        return out

    def size(self) -> int:
        """Blocks held by the tree (= tokens cached)."""
        return self._size

"""An independent serving submission (radix cache), written from the stubs and README only.

The tree keeps, besides the nodes, a running count of cached blocks; eviction collects the
unreferenced leaves once into a heap ordered by (stamp, creation number) and pushes a parent
when its last child goes.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from typing import Any

__all__ = ["RadixCache"]


class _Node:
    __slots__ = ("tokens", "blocks", "children", "parent", "refs", "stamp", "serial")

    def __init__(self, tokens: list[int], blocks: list[int], parent: _Node | None,
                 stamp: int, serial: int) -> None:
        self.tokens = tokens
        self.blocks = blocks
        self.children: dict[int, _Node] = {}
        self.parent = parent
        self.refs = 0
        self.stamp = stamp
        self.serial = serial

    def __repr__(self) -> str:
        return f"_Node(tokens={self.tokens}, refs={self.refs}, stamp={self.stamp})"


class RadixCache:
    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self._serials = itertools.count()
        self.root = _Node([], [], None, 0, next(self._serials))
        self._clock = 0
        self._cached = 0

    # -- walking ---------------------------------------------------------------------------------
    def _split(self, node: _Node, keep: int) -> _Node:
        """Cut `node`'s edge after `keep` tokens; returns the new upper node. The old object
        stays the lower node (requests holding it keep pointing at the same tokens)."""
        parent = node.parent
        upper = _Node(node.tokens[:keep], node.blocks[:keep], parent, node.stamp,
                      next(self._serials))
        upper.refs = node.refs  # every reference through node passes through upper too
        node.tokens, node.blocks = node.tokens[keep:], node.blocks[keep:]
        node.parent = upper
        upper.children[node.tokens[0]] = node
        parent.children[upper.tokens[0]] = upper
        return upper

    def _walk(self, tokens: Sequence[int]) -> tuple[_Node, int, list[int]]:
        """Follow `tokens` from the root, splitting where the walk ends inside an edge, and
        stamp the path with a new tick. Returns (last node, tokens matched, their blocks)."""
        self._clock += 1
        tick = self._clock
        node, depth, found = self.root, 0, []
        node.stamp = tick
        total = len(tokens)
        while depth < total:
            child = node.children.get(tokens[depth])
            if child is None:
                break
            edge = child.tokens
            same = 0
            limit = min(len(edge), total - depth)
            while same < limit and edge[same] == tokens[depth + same]:
                same += 1
            if same < len(edge):
                child = self._split(child, same)
            child.stamp = tick
            found.extend(child.blocks)
            depth += same
            node = child
            if same < len(edge):
                break
        return node, depth, found

    # -- the API ---------------------------------------------------------------------------------
    def match_prefix(self, tokens: Sequence[int]) -> tuple[list[int], Any]:
        node, _, found = self._walk(list(tokens))
        return found, node

    def insert(self, tokens: Sequence[int], blocks: Sequence[int]) -> int:
        tokens, blocks = list(tokens), list(blocks)
        if len(tokens) != len(blocks):
            raise ValueError(f"insert: {len(tokens)} tokens but {len(blocks)} blocks")
        node, depth, _ = self._walk(tokens)
        if depth < len(tokens):
            rest_blocks = blocks[depth:]
            self.manager.incref(rest_blocks)
            leaf = _Node(tokens[depth:], rest_blocks, node, self._clock, next(self._serials))
            node.children[leaf.tokens[0]] = leaf
            self._cached += len(rest_blocks)
        return depth

    def _path(self, node: _Node) -> list[_Node]:
        out = []
        while node is not None and node is not self.root:
            out.append(node)
            node = node.parent
        return out

    def inc_ref(self, node: Any) -> None:
        for n in self._path(node):
            n.refs += 1

    def dec_ref(self, node: Any) -> None:
        path = self._path(node)
        for n in path:
            if n.refs < 1:
                raise RuntimeError(f"dec_ref below zero on {n!r}")
        for n in path:
            n.refs -= 1

    def evict(self, num_blocks: int) -> int:
        if num_blocks <= 0:
            return 0
        heap: list[tuple[int, int, _Node]] = []
        stack = list(self.root.children.values())
        while stack:
            n = stack.pop()
            if n.children:
                stack.extend(n.children.values())
            elif n.refs == 0:
                heap.append((n.stamp, n.serial, n))
        heapq.heapify(heap)
        removed = 0
        while removed < num_blocks and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            del parent.children[leaf.tokens[0]]
            leaf.parent = None
            self.manager.free(leaf.blocks)
            removed += len(leaf.blocks)
            self._cached -= len(leaf.blocks)
            if parent is not self.root and not parent.children and parent.refs == 0:
                heapq.heappush(heap, (parent.stamp, parent.serial, parent))
        return removed

    def size(self) -> int:
        return self._cached

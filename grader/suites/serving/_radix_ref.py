"""A model of RadixCache's documented behaviour, for judging traces in the parent.

Written differently from a pointer-based tree on purpose: a node is named by the full token
prefix it ends at (a tuple), and the tree is a dict from those prefixes to the node's stamp
and blocks. A node's children are the nodes whose prefix extends it with no node between;
a node is referenced while some held lock's prefix starts with its own.
"""

from __future__ import annotations

from typing import Any


class RadixModel:
    def __init__(self, num_blocks: int) -> None:
        self.nodes: dict[tuple[int, ...], dict[str, Any]] = {}  # prefix -> {stamp, blocks}
        self.clock = 0
        self.locks: list[tuple[int, ...]] = []
        self.refcounts = [0] * num_blocks

    # structure
    def _parent(self, key: tuple[int, ...]) -> tuple[int, ...]:
        best: tuple[int, ...] = ()
        for other in self.nodes:
            if len(best) < len(other) < len(key) and key[:len(other)] == other:
                best = other
        return best

    def _children(self, key: tuple[int, ...]) -> list[tuple[int, ...]]:
        return [k for k in self.nodes if len(k) > len(key) and k[:len(key)] == key
                and self._parent(k) == key]

    def _walk(self, tokens: list[int]) -> tuple[tuple[int, ...], list[int]]:
        """Deepest node on tokens' path (splitting where the walk stops inside an edge)."""
        self.clock += 1
        here: tuple[int, ...] = ()
        blocks: list[int] = []
        tokens = list(tokens)
        while len(here) < len(tokens):
            nxt = [k for k in self._children(here) if k[len(here)] == tokens[len(here)]]
            if not nxt:
                break
            child = nxt[0]
            common = len(here)
            while common < len(child) and common < len(tokens) and \
                    child[common] == tokens[common]:
                common += 1
            split = common < len(child)
            if split:  # the walk stops inside this edge: cut it there
                upper = child[:common]
                node = self.nodes[child]
                cut = common - len(here)
                self.nodes[upper] = {"stamp": node["stamp"], "blocks": node["blocks"][:cut]}
                node["blocks"] = node["blocks"][cut:]
                child = upper
            self.nodes[child]["stamp"] = self.clock
            blocks += self.nodes[child]["blocks"]
            here = child
            if split:
                break
        return here, blocks

    # operations
    def match(self, tokens: list[int]) -> list[int]:
        return self._walk(tokens)[1]

    def lock(self, tokens: list[int]) -> list[int]:
        here, blocks = self._walk(tokens)
        self.locks.append(here)
        return blocks

    def unlock(self, index: int) -> None:
        self.locks.pop(index)

    def insert(self, tokens: list[int], blocks: list[int]) -> int:
        here, _ = self._walk(tokens)
        n = len(here)
        if n < len(tokens):
            self.nodes[tuple(tokens)] = {"stamp": self.clock, "blocks": list(blocks[n:])}
            for b in blocks[n:]:
                self.refcounts[b] += 1
        return n

    def locked(self, key: tuple[int, ...]) -> bool:
        return any(lock[:len(key)] == key for lock in self.locks)

    def evict(self, num_blocks: int) -> tuple[int, list[tuple[int, ...]]]:
        removed, gone = 0, []
        while removed < num_blocks:
            leaves = [k for k in self.nodes if not self._children(k) and not self.locked(k)]
            if not leaves:
                break
            victim = min(leaves, key=lambda k: self.nodes[k]["stamp"])
            for b in self.nodes[victim]["blocks"]:
                self.refcounts[b] -= 1
            removed += len(self.nodes[victim]["blocks"])
            gone.append(victim)
            del self.nodes[victim]
        return removed, gone

    def size(self) -> int:
        return sum(len(n["blocks"]) for n in self.nodes.values())

"""References of the serving hidden suite, computed in the parent: one request at a time
through the provided model, with this suite's own sampler (`ref_sample`), a static-batching
step count, and a model of RadixCache's documented behaviour (`RadixModel`). The checks of an
engine run's trace against the documented rules are in `_ref_checks`.

Everything is exact (token ids, counts), so no comparison has a tolerance.

`RadixModel` is written differently from a pointer-based tree on purpose: a node is named by
the full token prefix it ends at (a tuple), and the tree is a dict from those prefixes to the
node's stamp and blocks. A node's children are the nodes whose prefix extends it with no node
between; a node is referenced while some held lock's prefix starts with its own.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from grader.suites.serving._ranks import SEED_STRIDE


# -- parent side: references ----------------------------------------------------------------------
def ref_sample(logits: torch.Tensor, temperature: float, seed: int, index: int) -> int:
    """engine.sample's documented rule, written again here."""
    if temperature == 0:
        return int(logits.argmax())
    gen = torch.Generator().manual_seed(seed * SEED_STRIDE + index)
    return int(torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=gen))


def reference_outputs(requests: list[dict], model_seed: int) -> dict[int, list[int]]:
    """Each request alone: prefill its prompt, then one decode per token (provided model)."""
    from assignments.serving.model import TinyLM

    out = {}
    longest = max(len(r["prompt"]) + r["max_tokens"] for r in requests)
    model = TinyLM(longest, seed=model_seed)
    for spec in requests:
        tokens = list(spec["prompt"])
        output: list[int] = []
        start = 0
        while True:
            logits = model.forward([(tokens, list(range(len(tokens))), start)])[0]
            token = ref_sample(logits, spec.get("temperature", 0.0), spec.get("seed", 0),
                               len(output))
            output.append(token)
            if len(output) >= spec["max_tokens"] or token == spec.get("stop_token"):
                break
            start = len(tokens)
            tokens.append(token)
        out[spec["request_id"]] = output
    return out


def static_steps(requests: list[dict], outputs: dict[int, list[int]], max_num_seqs: int,
                 max_num_tokens: int) -> int:
    """Forwards of static batching: groups of max_num_seqs in arrival order, each prefilled
    (ceil(prompt tokens / budget) forwards) then decoded until its longest output is done."""
    steps = 0
    for i in range(0, len(requests), max_num_seqs):
        group = requests[i:i + max_num_seqs]
        steps += math.ceil(sum(len(r["prompt"]) for r in group) / max_num_tokens)
        steps += max(len(outputs[r["request_id"]]) for r in group) - 1
    return steps


def roomy_plans(requests: list[dict], outputs: dict[int, list[int]], max_num_seqs: int,
                max_num_tokens: int) -> list[set[tuple[int, int, int]]]:
    """The documented plans when the pool never runs short and there is no cache, all
    requests arriving at once: sets of (request_id, start, num_tokens) per forward."""
    waiting = [dict(r, computed=0, produced=0) for r in requests]
    running: list[dict] = []
    plans = []
    while waiting or running:
        budget, plan, done = max_num_tokens, set(), []
        for r in running:
            known = len(r["prompt"]) + r["produced"]
            if r["computed"] >= known - 1:
                plan.add((r["request_id"], r["computed"], 1))
                r["computed"] += 1
                budget -= 1
        for r in running:
            known = len(r["prompt"]) + r["produced"]
            if known - r["computed"] > 1 and budget > 0:
                take = min(known - r["computed"], budget)
                plan.add((r["request_id"], r["computed"], take))
                r["computed"] += take
                budget -= take
        while waiting and budget > 0 and len(running) < max_num_seqs:
            r = waiting.pop(0)
            take = min(len(r["prompt"]), budget)
            plan.add((r["request_id"], 0, take))
            r["computed"] = take
            budget -= take
            running.append(r)
        for r in running:
            if r["computed"] == len(r["prompt"]) + r["produced"]:
                r["produced"] += 1
                if r["produced"] == len(outputs[r["request_id"]]):
                    done.append(r)
        running = [r for r in running if r not in done]
        plans.append(plan)
    return plans


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

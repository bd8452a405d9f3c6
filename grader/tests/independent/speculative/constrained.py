"""An independent constrained.py, written from the stub's docstrings and the README only.

Differs from the reference on purpose: the regex becomes a DFA by the position (Glushkov)
construction, not Thompson's: the parse tree's character positions with nullable / first /
last / follow sets, and DFA states are sets of positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from assignments.speculative.automata import DFA
from assignments.speculative.lm import CausalLM, next_token_probs


@dataclass
class _Node:
    nullable: bool
    first: frozenset[int]
    last: frozenset[int]


class _Glushkov:
    def __init__(self, pattern: str, alphabet: str) -> None:
        self.s, self.i, self.alphabet = pattern, 0, alphabet
        self.sets: list[frozenset[str]] = []       # position -> characters it matches
        self.follow: list[set[int]] = []

    def _pos(self, chars: frozenset[str]) -> _Node:
        self.sets.append(chars)
        self.follow.append(set())
        p = frozenset({len(self.sets) - 1})
        return _Node(False, p, p)

    def _more(self) -> bool:
        return self.i < len(self.s)

    def parse(self) -> _Node:
        node = self._alt()
        if self._more():
            raise ValueError(f"unexpected {self.s[self.i]!r} in {self.s!r}")
        return node

    def _alt(self) -> _Node:
        node = self._cat()
        while self._more() and self.s[self.i] == "|":
            self.i += 1
            other = self._cat()
            node = _Node(node.nullable or other.nullable, node.first | other.first,
                         node.last | other.last)
        return node

    def _cat(self) -> _Node:
        node = _Node(True, frozenset(), frozenset())
        while self._more() and self.s[self.i] not in "|)":
            right = self._post()
            for p in node.last:
                self.follow[p] |= right.first
            node = _Node(node.nullable and right.nullable,
                         node.first | right.first if node.nullable else node.first,
                         right.last | node.last if right.nullable else right.last)
        return node

    def _post(self) -> _Node:
        node = self._atom()
        while self._more() and self.s[self.i] in "*+?":
            op = self.s[self.i]
            self.i += 1
            if op in "*+":
                for p in node.last:
                    self.follow[p] |= node.first
            node = _Node(node.nullable or op in "*?", node.first, node.last)
        return node

    def _atom(self) -> _Node:
        c = self.s[self.i]
        self.i += 1
        if c in "*+?":
            raise ValueError("nothing to repeat")
        if c in ")]":
            raise ValueError(f"unbalanced {c}")
        if c == "(":
            inner = self._alt()
            if not self._more() or self.s[self.i] != ")":
                raise ValueError("missing )")
            self.i += 1
            return inner
        if c == ".":
            return self._pos(frozenset(self.alphabet))
        if c == "\\":
            if not self._more():
                raise ValueError("trailing backslash")
            self.i += 1
            return self._pos(frozenset(self.s[self.i - 1]))
        if c == "[":
            return self._pos(self._klass())
        return self._pos(frozenset(c))

    def _klass(self) -> frozenset[str]:
        items: list[str] = []
        if self._more() and self.s[self.i] == "^":
            raise ValueError("negated class")
        while True:
            if not self._more():
                raise ValueError("unterminated [")
            c = self.s[self.i]
            self.i += 1
            if c == "]":
                break
            if c == "\\":
                if not self._more():
                    raise ValueError("trailing backslash")
                c = self.s[self.i]
                self.i += 1
            items.append(c)
            if self.i + 1 < len(self.s) and self.s[self.i] == "-" and self.s[self.i + 1] != "]":
                hi = self.s[self.i + 1]
                self.i += 2
                if hi == "\\":
                    if not self._more():
                        raise ValueError("trailing backslash")
                    hi = self.s[self.i]
                    self.i += 1
                lo = items.pop()
                if hi < lo:
                    raise ValueError("reversed range")
                items.extend(chr(o) for o in range(ord(lo), ord(hi) + 1))
        if not items:
            raise ValueError("empty class")
        return frozenset(items)


def compile_regex(pattern: str, alphabet: str) -> DFA:
    g = _Glushkov(pattern, alphabet)
    root = g.parse()
    START = -1  # the initial state, before any position
    ids: dict[frozenset[int], int] = {}
    rows: list[dict[str, int]] = []
    acc: set[int] = set()
    todo: list[frozenset[int]] = [frozenset({START})]
    ids[todo[0]] = 0
    rows.append({})
    while todo:
        cur = todo.pop()
        me = ids[cur]
        if START in cur and root.nullable or cur & root.last:
            acc.add(me)
        nexts: set[int] = set(root.first) if START in cur else set()
        for p in cur - {START}:
            nexts |= g.follow[p]
        by_char: dict[str, set[int]] = {}
        for p in nexts:
            for ch in g.sets[p]:
                by_char.setdefault(ch, set()).add(p)
        for ch, ps in by_char.items():
            key = frozenset(ps)
            if key not in ids:
                ids[key] = len(rows)
                rows.append({})
                todo.append(key)
            rows[me][ch] = ids[key]
    return DFA(start=0, accepting=frozenset(acc), transitions=rows)


def _alive(dfa: DFA) -> list[bool]:
    good = [s in dfa.accepting for s in range(dfa.num_states)]
    changed = True
    while changed:
        changed = False
        for s in range(dfa.num_states):
            if not good[s] and any(good[t] for t in dfa.transitions[s].values()):
                good[s] = changed = True
    return good


def token_mask(dfa: DFA, state: int, vocab: list[str], eos_id: int) -> torch.Tensor:
    return mask_index(dfa, vocab, eos_id)[state].clone()


def mask_index(dfa: DFA, vocab: list[str], eos_id: int) -> torch.Tensor:
    good = _alive(dfa)
    table = torch.zeros(dfa.num_states, len(vocab), dtype=torch.bool)
    for s in range(dfa.num_states):
        for t, word in enumerate(vocab):
            if t == eos_id:
                table[s, t] = s in dfa.accepting
            elif word:
                end = dfa.run(s, word)
                table[s, t] = end is not None and good[end]
    return table


def constrained_generate(model: CausalLM, prompt: torch.Tensor, pattern: str, vocab: list[str],
                         eos_id: int, max_new_tokens: int, generator: torch.Generator
                         ) -> torch.Tensor:
    chars = sorted(set("".join(w for t, w in enumerate(vocab) if t != eos_id)))
    dfa = compile_regex(pattern, "".join(chars))
    table = mask_index(dfa, vocab, eos_id)
    model.reset()
    state, result = dfa.start, []
    feed = torch.as_tensor(prompt).long().flatten()
    for _ in range(max_new_tokens):
        probs = next_token_probs(model.forward(feed)[-1], 1.0) * table[state]
        if float(probs.sum()) <= 0:
            raise ValueError("empty mask")
        tok = int(torch.multinomial(probs, 1, generator=generator))
        if tok == eos_id:
            break
        result.append(tok)
        nxt = dfa.run(state, vocab[tok])
        assert nxt is not None
        state = nxt
        feed = torch.tensor([tok])
    return torch.tensor(result, dtype=torch.long)

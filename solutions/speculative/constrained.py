"""Constrained decoding: a regular expression, its DFA, and per-state token masks.

The regex is compiled the classic way (Thompson 1968, "Regular expression search algorithm";
Rabin and Scott 1959 for the subset construction) and the DFA drives the sampler as in
Outlines (Willard and Louf 2023, "Efficient Guided Generation for Large Language Models"):
one mask per DFA state, computed once, then a lookup per generated token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from assignments.speculative.automata import DFA
from assignments.speculative.lm import CausalLM, next_token_probs

# ---- Thompson NFA ---------------------------------------------------------------------------

@dataclass
class _NFA:
    """States are integers; `eps[s]` are ε-edges, `edges[s]` (character set, target) pairs."""

    eps: list[list[int]] = field(default_factory=list)
    edges: list[list[tuple[frozenset[str], int]]] = field(default_factory=list)

    def state(self) -> int:
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1


_Fragment = tuple[int, int]  # (entry state, exit state) of a sub-automaton


class _Parser:
    """Recursive descent over the pattern, building NFA fragments as it goes."""

    def __init__(self, pattern: str, alphabet: str, nfa: _NFA) -> None:
        self.text, self.pos, self.alphabet, self.nfa = pattern, 0, frozenset(alphabet), nfa

    def peek(self) -> str | None:
        return self.text[self.pos] if self.pos < len(self.text) else None

    def take(self) -> str:
        char = self.text[self.pos]
        self.pos += 1
        return char

    def chars(self, allowed: frozenset[str]) -> _Fragment:
        entry, exit_ = self.nfa.state(), self.nfa.state()
        self.nfa.edges[entry].append((allowed, exit_))
        return entry, exit_

    def empty(self) -> _Fragment:
        entry, exit_ = self.nfa.state(), self.nfa.state()
        self.nfa.eps[entry].append(exit_)
        return entry, exit_

    def alternation(self) -> _Fragment:
        # Lowest precedence: concatenations separated by |.
        branches = [self.concatenation()]
        while self.peek() == "|":
            self.take()
            branches.append(self.concatenation())
        if len(branches) == 1:
            return branches[0]
        entry, exit_ = self.nfa.state(), self.nfa.state()
        for first, last in branches:
            self.nfa.eps[entry].append(first)
            self.nfa.eps[last].append(exit_)
        return entry, exit_

    def concatenation(self) -> _Fragment:
        parts: list[_Fragment] = []
        while self.peek() is not None and self.peek() not in "|)":
            parts.append(self.repetition())
        if not parts:
            return self.empty()
        for (_, last), (first, _) in zip(parts, parts[1:]):
            self.nfa.eps[last].append(first)
        return parts[0][0], parts[-1][1]

    def repetition(self) -> _Fragment:
        # Postfix operators bind tightest and may stack: each wraps what came before.
        inner = self.atom()
        while self.peek() in ("*", "+", "?"):
            op = self.take()
            first, last = inner
            entry, exit_ = self.nfa.state(), self.nfa.state()
            self.nfa.eps[entry].append(first)
            self.nfa.eps[last].append(exit_)
            if op in "*?":
                self.nfa.eps[entry].append(exit_)  # zero occurrences
            if op in "*+":
                self.nfa.eps[last].append(first)  # once more
            inner = entry, exit_
        return inner

    def atom(self) -> _Fragment:
        char = self.take()
        if char == "(":
            inner = self.alternation()
            if self.peek() != ")":
                raise ValueError(f"unbalanced '(' in {self.text!r}")
            self.take()
            return inner
        if char == "[":
            return self.chars(self.bracket())
        if char == ".":
            return self.chars(self.alphabet)
        if char == "\\":
            if self.peek() is None:
                raise ValueError(f"trailing backslash in {self.text!r}")
            return self.chars(frozenset(self.take()))
        if char in "*+?":
            raise ValueError(f"{char!r} at position {self.pos - 1} of {self.text!r} has "
                             f"nothing to repeat")
        if char in ")]":
            raise ValueError(f"unbalanced {char!r} at position {self.pos - 1} of "
                             f"{self.text!r}")
        return self.chars(frozenset(char))

    def bracket(self) -> frozenset[str]:
        members: list[str] = []
        if self.peek() == "^":
            raise ValueError(f"negated classes [^...] are not supported: {self.text!r}")
        while True:
            if self.peek() is None:
                raise ValueError(f"unterminated '[' in {self.text!r}")
            char = self.take()
            if char == "]":
                break
            if char == "\\":
                if self.peek() is None:
                    raise ValueError(f"trailing backslash in {self.text!r}")
                char = self.take()
            # A '-' between two members makes a range.
            if self.peek() == "-" and self.pos + 1 < len(self.text) and \
                    self.text[self.pos + 1] != "]":
                self.take()
                high = self.take()
                if high == "\\":
                    if self.peek() is None:
                        raise ValueError(f"trailing backslash in {self.text!r}")
                    high = self.take()
                if ord(high) < ord(char):
                    raise ValueError(f"reversed range {char}-{high} in {self.text!r}")
                members.extend(chr(c) for c in range(ord(char), ord(high) + 1))
            else:
                members.append(char)
        if not members:
            raise ValueError(f"empty class [] in {self.text!r}")
        return frozenset(members)


def _closure(nfa: _NFA, states: set[int]) -> frozenset[int]:
    """Every NFA state reachable from `states` by ε-edges alone."""
    stack, seen = list(states), set(states)
    while stack:
        for nxt in nfa.eps[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return frozenset(seen)


def compile_regex(pattern: str, alphabet: str) -> DFA:
    """The DFA of `pattern` (Thompson NFA, then the subset construction; README §6)."""
    nfa = _NFA()
    parser = _Parser(pattern, alphabet, nfa)
    entry, final = parser.alternation()
    if parser.pos != len(pattern):  # the only way alternation() stops early is a ')'
        raise ValueError(f"unbalanced ')' at position {parser.pos} of {pattern!r}")
    # Subset construction: a DFA state is the ε-closed set of NFA states the input may be in.
    start = _closure(nfa, {entry})
    index = {start: 0}
    order = [start]
    transitions: list[dict[str, int]] = []
    for subset in order:  # `order` grows while we walk it
        moves: dict[str, set[int]] = {}
        for s in subset:
            for chars, target in nfa.edges[s]:
                for char in chars:
                    moves.setdefault(char, set()).add(target)
        row: dict[str, int] = {}
        for char in sorted(moves):
            nxt = _closure(nfa, moves[char])
            if nxt not in index:
                index[nxt] = len(order)
                order.append(nxt)
            row[char] = index[nxt]
        transitions.append(row)
    accepting = frozenset(i for i, subset in enumerate(order) if final in subset)
    return DFA(start=0, accepting=accepting, transitions=transitions)


# ---- masks ----------------------------------------------------------------------------------

def _live_states(dfa: DFA) -> set[int]:
    """States from which an accepting state is reachable: a backward search from them."""
    incoming: list[set[int]] = [set() for _ in range(dfa.num_states)]
    for s, row in enumerate(dfa.transitions):
        for t in row.values():
            incoming[t].add(s)
    live = set(dfa.accepting)
    stack = list(live)
    while stack:
        for prev in incoming[stack.pop()]:
            if prev not in live:
                live.add(prev)
                stack.append(prev)
    return live


def _mask(dfa: DFA, state: int, vocab: list[str], eos_id: int, live: set[int]) -> torch.Tensor:
    mask = torch.zeros(len(vocab), dtype=torch.bool)
    for t, text in enumerate(vocab):
        if t == eos_id:
            mask[t] = state in dfa.accepting
            continue
        # Walk every character: a token is a path through several states, not one edge.
        end = dfa.run(state, text) if text else None
        mask[t] = end is not None and end in live
    return mask


def token_mask(dfa: DFA, state: int, vocab: list[str], eos_id: int) -> torch.Tensor:
    """Which tokens may come next in DFA state `state` (README §7)."""
    return _mask(dfa, state, vocab, eos_id, _live_states(dfa))


def mask_index(dfa: DFA, vocab: list[str], eos_id: int) -> torch.Tensor:
    """Every state's mask precomputed, [num_states, len(vocab)] (README §7)."""
    live = _live_states(dfa)
    if dfa.num_states == 0:
        return torch.zeros(0, len(vocab), dtype=torch.bool)
    return torch.stack([_mask(dfa, s, vocab, eos_id, live) for s in range(dfa.num_states)])


def constrained_generate(model: CausalLM, prompt: torch.Tensor, pattern: str, vocab: list[str],
                         eos_id: int, max_new_tokens: int, generator: torch.Generator
                         ) -> torch.Tensor:
    """Sample tokens whose text matches `pattern` (README §7)."""
    alphabet = "".join(sorted({c for t, text in enumerate(vocab) if t != eos_id for c in text}))
    dfa = compile_regex(pattern, alphabet)
    # The index is built once; each step is then a row lookup, whatever the vocabulary size.
    masks = mask_index(dfa, vocab, eos_id)
    model.reset()
    state = dfa.start
    out: list[int] = []
    fed = torch.as_tensor(prompt).reshape(-1).to(torch.long)
    while len(out) < max_new_tokens:
        probs = next_token_probs(model.forward(fed)[-1], 1.0)
        allowed = masks[state]
        if not bool(allowed.any()):
            raise ValueError(f"no token can continue {pattern!r} from DFA state {state}")
        probs = torch.where(allowed, probs, torch.zeros_like(probs))
        token = int(torch.multinomial(probs / probs.sum(), 1, generator=generator))
        if token == eos_id:
            break
        out.append(token)
        next_state = dfa.run(state, vocab[token])
        assert next_state is not None  # the mask allowed it
        state = next_state
        fed = torch.tensor([token])
    return torch.tensor(out, dtype=torch.long)

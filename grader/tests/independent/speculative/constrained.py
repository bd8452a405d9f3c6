"""Constrained decoding: a regular expression, its DFA, and per-state token masks (README §6-§7).

Independent implementation: the regex is parsed into a syntax tree and turned into a DFA by the
position (followpos / McNaughton-Yamada) construction, which yields the same language as
Thompson + subsets without epsilon edges. Masks walk a trie of the vocabulary through the DFA,
pruning at the first missing transition or dead (non-live) state.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch

from assignments.speculative.automata import DFA
from assignments.speculative.lm import CausalLM, next_token_probs

_META = set(".*+?|()[]\\")
_POSTFIX = set("*+?")


# --------------------------------------------------------------------------- syntax tree

@dataclass
class _Node:
    kind: str                      # "sym", "eps", "cat", "alt", "star", "plus", "opt"
    kids: tuple = ()
    chars: frozenset = frozenset()
    pos: int = -1
    nullable: bool = False
    first: frozenset = frozenset()
    last: frozenset = frozenset()


@dataclass
class _Parser:
    text: str
    alphabet: frozenset
    i: int = 0
    symbols: list = field(default_factory=list)   # position -> set of characters

    def fail(self, why: str) -> ValueError:
        return ValueError(f"bad pattern {self.text!r} at {self.i}: {why}")

    def peek(self) -> str | None:
        return self.text[self.i] if self.i < len(self.text) else None

    def sym(self, chars: frozenset) -> _Node:
        self.symbols.append(chars)
        return _Node("sym", chars=chars, pos=len(self.symbols) - 1)

    def parse(self) -> _Node:
        tree = self.alternation()
        if self.i != len(self.text):   # only a stray ')' stops alternation early
            raise self.fail("unbalanced ')'")
        return tree

    def alternation(self) -> _Node:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        node = branches[0]
        for other in branches[1:]:
            node = _Node("alt", (node, other))
        return node

    def sequence(self) -> _Node:
        parts: list[_Node] = []
        while True:
            c = self.peek()
            if c is None or c in "|)":
                break
            if c in _POSTFIX:
                raise self.fail(f"'{c}' has nothing to repeat")
            node = self.atom()
            while self.peek() is not None and self.peek() in _POSTFIX:
                op = self.peek()
                self.i += 1
                node = _Node({"*": "star", "+": "plus", "?": "opt"}[op], (node,))
            parts.append(node)
        if not parts:
            return _Node("eps")
        node = parts[0]
        for nxt in parts[1:]:
            node = _Node("cat", (node, nxt))
        return node

    def atom(self) -> _Node:
        c = self.text[self.i]
        if c == "(":
            self.i += 1
            inner = self.alternation()
            if self.peek() != ")":
                raise self.fail("unbalanced '('")
            self.i += 1
            return inner
        if c == "]":
            raise self.fail("']' outside a character class")
        if c == "[":
            return self.sym(self.bracket())
        if c == ".":
            self.i += 1
            return self.sym(self.alphabet)
        if c == "\\":
            if self.i + 1 >= len(self.text):
                raise self.fail("trailing backslash")
            self.i += 2
            return self.sym(frozenset(self.text[self.i - 1]))
        self.i += 1
        return self.sym(frozenset(c))

    def bracket(self) -> frozenset:
        self.i += 1  # past '['
        if self.peek() == "^":
            raise self.fail("negated classes are not supported")
        members: set[str] = set()
        empty = True

        def one() -> str:
            ch = self.peek()
            if ch is None:
                raise self.fail("unterminated '['")
            if ch == "\\":
                if self.i + 1 >= len(self.text):
                    raise self.fail("trailing backslash")
                self.i += 2
                return self.text[self.i - 1]
            self.i += 1
            return ch

        while True:
            ch = self.peek()
            if ch is None:
                raise self.fail("unterminated '['")
            if ch == "]":
                self.i += 1
                break
            low = one()
            empty = False
            if self.peek() == "-" and self.i + 1 < len(self.text) and self.text[self.i + 1] != "]":
                self.i += 1  # the '-'
                high = one()
                if ord(high) < ord(low):
                    raise self.fail(f"reversed range {low}-{high}")
                members.update(chr(o) for o in range(ord(low), ord(high) + 1))
            else:
                members.add(low)
        if empty:
            raise self.fail("empty '[]'")
        return frozenset(members)


def _annotate(node: _Node, follow: list[set[int]]) -> None:
    """nullable / first / last bottom-up, and the followpos sets."""
    for kid in node.kids:
        _annotate(kid, follow)
    if node.kind == "eps":
        node.nullable = True
    elif node.kind == "sym":
        node.nullable = False
        node.first = node.last = frozenset({node.pos})
    elif node.kind == "alt":
        a, b = node.kids
        node.nullable = a.nullable or b.nullable
        node.first = a.first | b.first
        node.last = a.last | b.last
    elif node.kind == "cat":
        a, b = node.kids
        node.nullable = a.nullable and b.nullable
        node.first = a.first | b.first if a.nullable else a.first
        node.last = a.last | b.last if b.nullable else b.last
        for p in a.last:
            follow[p] |= b.first
    else:  # star, plus, opt
        (a,) = node.kids
        node.nullable = node.kind != "plus" or a.nullable
        node.first, node.last = a.first, a.last
        if node.kind != "opt":
            for p in a.last:
                follow[p] |= a.first


def compile_regex(pattern: str, alphabet: str) -> DFA:
    """The DFA of `pattern` (the language re.fullmatch accepts within the subset; README §6)."""
    parser = _Parser(pattern, frozenset(alphabet))
    tree = parser.parse()
    end = parser.sym(frozenset())          # the end marker '#', matched by no character
    root = _Node("cat", (tree, _Node("sym", chars=frozenset(), pos=end.pos)))
    follow: list[set[int]] = [set() for _ in parser.symbols]
    _annotate(root, follow)
    final = end.pos
    chars = sorted(set().union(*parser.symbols)) if parser.symbols else []

    ids: dict[frozenset, int] = {root.first: 0}
    order = [root.first]
    rows: list[dict[str, int]] = []
    at = 0
    while at < len(order):
        here = order[at]
        row: dict[str, int] = {}
        for ch in chars:
            nxt: set[int] = set()
            for p in here:
                if ch in parser.symbols[p]:
                    nxt |= follow[p]
            if not nxt:
                continue
            key = frozenset(nxt)
            if key not in ids:
                ids[key] = len(order)
                order.append(key)
            row[ch] = ids[key]
        rows.append(row)
        at += 1
    accepting = frozenset(i for i, s in enumerate(order) if final in s)
    return DFA(start=0, accepting=accepting, transitions=rows)


# --------------------------------------------------------------------------- masks

def _live_states(dfa: DFA) -> list[bool]:
    """States from which some accepting state is reachable (backward search)."""
    n = dfa.num_states
    preds: list[list[int]] = [[] for _ in range(n)]
    for src, row in enumerate(dfa.transitions):
        for dst in row.values():
            preds[int(dst)].append(src)
    live = [False] * n
    queue = deque(int(s) for s in dfa.accepting)
    for s in queue:
        live[s] = True
    while queue:
        s = queue.popleft()
        for before in preds[s]:
            if not live[before]:
                live[before] = True
                queue.append(before)
    return live


def _trie(vocab: list[str], eos_id: int) -> list[tuple[dict[str, int], list[int]]]:
    """Nodes (children by character, token ids ending here); node 0 is the root."""
    nodes: list[tuple[dict[str, int], list[int]]] = [({}, [])]
    for tid, text in enumerate(vocab):
        if tid == eos_id or not text:
            continue
        at = 0
        for ch in text:
            kids = nodes[at][0]
            if ch not in kids:
                kids[ch] = len(nodes)
                nodes.append(({}, []))
            at = kids[ch]
        nodes[at][1].append(tid)
    return nodes


def _fill_row(dfa: DFA, state: int, live: list[bool], nodes, row: torch.Tensor,
              eos_id: int) -> None:
    if 0 <= eos_id < row.numel() and state in dfa.accepting:
        row[eos_id] = True
    if not live[state]:
        return
    stack = [(0, state)]
    allowed: list[int] = []
    while stack:
        node, s = stack.pop()
        kids, ending = nodes[node]
        if node:            # a non-empty string ended in live state s
            allowed.extend(ending)
        trans = dfa.transitions[s]
        for ch, child in kids.items():
            nxt = trans.get(ch)
            if nxt is not None and live[nxt]:   # a dead state never leads back to life
                stack.append((child, nxt))
    if allowed:
        row[torch.tensor(allowed, dtype=torch.long)] = True


def token_mask(dfa: DFA, state: int, vocab: list[str], eos_id: int) -> torch.Tensor:
    """Which tokens may come next in DFA state `state` (README §7): bool [len(vocab)]."""
    if not 0 <= int(state) < dfa.num_states:
        raise ValueError(f"state {state} is not a state of a {dfa.num_states}-state DFA")
    row = torch.zeros(len(vocab), dtype=torch.bool)
    _fill_row(dfa, int(state), _live_states(dfa), _trie(vocab, eos_id), row, eos_id)
    return row


def mask_index(dfa: DFA, vocab: list[str], eos_id: int) -> torch.Tensor:
    """Every state's mask: bool [dfa.num_states, len(vocab)], row s = token_mask(dfa, s, ...)."""
    live = _live_states(dfa)
    nodes = _trie(vocab, eos_id)
    table = torch.zeros(dfa.num_states, len(vocab), dtype=torch.bool)
    for s in range(dfa.num_states):
        _fill_row(dfa, s, live, nodes, table[s], eos_id)
    return table


# --------------------------------------------------------------------------- generation

def constrained_generate(model: CausalLM, prompt: torch.Tensor, pattern: str, vocab: list[str],
                         eos_id: int, max_new_tokens: int, generator: torch.Generator
                         ) -> torch.Tensor:
    """Sample tokens whose text matches `pattern` from the masked model (README §7)."""
    if model.vocab_size != len(vocab):
        raise ValueError(f"model vocab {model.vocab_size} != len(vocab) {len(vocab)}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    pending = torch.as_tensor(prompt).reshape(-1).to(torch.long)
    if pending.numel() == 0:
        raise ValueError("the prompt must hold at least one token")
    alphabet = "".join(sorted({ch for t, s in enumerate(vocab) if t != eos_id for ch in s}))
    dfa = compile_regex(pattern, alphabet)
    table = mask_index(dfa, vocab, eos_id)

    model.reset()
    state = dfa.start
    out: list[int] = []
    while len(out) < max_new_tokens:
        allowed = table[state]
        if not bool(allowed.any()):
            raise ValueError(f"no token of the vocabulary continues {pattern!r} from DFA "
                             f"state {state}")
        logits = model.forward(pending)[-1]
        probs = next_token_probs(logits, 1.0)
        weights = torch.where(allowed, probs, torch.zeros_like(probs))
        if not float(weights.sum()) > 0.0:  # every allowed token underflowed: masked softmax
            weights = torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
        cdf = torch.cumsum(weights, dim=0)
        u = torch.rand((), generator=generator, dtype=torch.float64) * cdf[-1]
        pick = int(torch.searchsorted(cdf, u.reshape(1), right=True)[0])
        if pick >= weights.numel():
            pick = int(torch.nonzero(weights > 0)[-1, 0])
        if pick == eos_id:
            break
        out.append(pick)
        state = dfa.run(state, vocab[pick])
        pending = torch.tensor([pick], dtype=torch.long)
    return torch.tensor(out, dtype=torch.long)

"""The DFA that compile_regex returns and token_mask reads (README §6). Provided: do not edit.

    dfa = DFA(start=0, accepting=frozenset({2}),
              transitions=[{"a": 1}, {"b": 2}, {}])   # the language {"ab"}
    dfa.step(0, "a")        # 1
    dfa.step(0, "b")        # None: no transition, the string is dead
    dfa.run(0, "ab")        # 2; None as soon as a character has no transition
    dfa.accepts("ab")       # True

States are the integers 0 .. num_states-1. A missing transition means "no string with this
prefix matches" (an implicit dead state). A DFA may also hold explicit states from which no
accepting state can be reached (a trap state with self-loops, say): nothing here removes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class DFA:
    """A deterministic finite automaton over characters.

    start        the start state
    accepting    the accepting states
    transitions  transitions[s] maps a character to the next state; a character missing from
                 it has no transition from s
    """

    start: int
    accepting: frozenset[int]
    transitions: Sequence[Mapping[str, int]]

    def __post_init__(self) -> None:
        n = len(self.transitions)
        states = [self.start, *self.accepting,
                  *(t for row in self.transitions for t in row.values())]
        if any(not 0 <= int(s) < n for s in states):
            raise ValueError(f"every state of a DFA lies in 0..{n - 1}")
        if any(len(c) != 1 for row in self.transitions for c in row):
            raise ValueError("DFA transitions are keyed by single characters")

    @property
    def num_states(self) -> int:
        return len(self.transitions)

    def step(self, state: int, char: str) -> int | None:
        """The state after `char` from `state`, None where there is no transition."""
        return self.transitions[state].get(char)

    def run(self, state: int, text: str) -> int | None:
        """The state after every character of `text` from `state`; None once one has none."""
        current: int | None = state
        for char in text:
            if current is None:
                return None
            current = self.step(current, char)
        return current

    def accepts(self, text: str) -> bool:
        """Whether `text` is in the DFA's language."""
        end = self.run(self.start, text)
        return end is not None and end in self.accepting

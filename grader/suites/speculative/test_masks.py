"""token_mask and mask_index against the mask the contract defines (README §7), computed here:
a token is allowed iff its string is not empty, the DFA has a transition for every character
of it from the state, and an accepting state is reachable from where it ends; EOS iff the
state is accepting. DFAs are built here: a hand-made one, random ones (whose states often
cannot reach an accepting state) and one with an explicit trap state; every state is asked.
"""

from __future__ import annotations

import itertools
import random

import pytest

from grader.seeds import shifted
from grader.suites.speculative._cases import run_tasks, value

ALPHABET = "abc"
SHORT_VOCAB = ["a", "b", "<eos>", "c", ""]
SHORT_EOS = 2
LONG_VOCAB = ["".join(chars) for n in (1, 2, 3) for chars in itertools.product(ALPHABET,
                                                                               repeat=n)]
LONG_VOCAB.insert(5, "<eos>")
LONG_VOCAB.append("")
LONG_EOS = 5


def dfa(start: int, accepting: list[int], transitions: list[dict[str, int]]) -> dict:
    return {"start": start, "accepting": accepting, "transitions": transitions}


# ab*c|ca with state 4 a trap state (self-loops, never accepting) and state 5 unreachable.
HAND = dfa(0, [2], [{"a": 1, "c": 3, "b": 4}, {"b": 1, "c": 2, "a": 4}, {"a": 4},
                    {"a": 2, "b": 4, "c": 4}, {"a": 4, "b": 4, "c": 4}, {"a": 2}])


def random_dfa(seed: int, states: int = 7) -> dict:
    rng = random.Random(shifted(seed))
    transitions = [{c: rng.randrange(states) for c in ALPHABET if rng.random() < 0.6}
                   for _ in range(states)]
    accepting = sorted(rng.sample(range(states), rng.choice([1, 2])))
    return dfa(rng.randrange(states), accepting, transitions)


RANDOM = {f"random_{seed}": random_dfa(seed) for seed in (401, 402, 403, 404)}
TRAP = dfa(0, [3], [{"a": 1, "b": 4, "c": 4}, {"b": 2, "a": 4, "c": 4},
                    {"c": 3, "a": 4, "b": 4}, {"a": 1}, {"a": 4, "b": 4, "c": 4}])
ONE_STATE = dfa(0, [0], [{"a": 0, "c": 0}])  # [ac]*: a single accepting state
CASES = {"hand": (HAND, SHORT_VOCAB, SHORT_EOS), "hand_long": (HAND, LONG_VOCAB, LONG_EOS),
         **{name: (d, LONG_VOCAB, LONG_EOS) for name, d in RANDOM.items()},
         "trap": (TRAP, LONG_VOCAB, LONG_EOS)}


def build() -> dict[str, dict]:
    tasks = {name: {"kind": "masks", "dfa": d, "states": list(range(len(d["transitions"]))),
                    "vocab": vocab, "eos_id": eos} for name, (d, vocab, eos) in CASES.items()}
    tasks["index"] = {"kind": "mask_index", "dfa": RANDOM["random_402"], "vocab": LONG_VOCAB,
                      "eos_id": LONG_EOS}
    tasks["index_trap"] = {"kind": "mask_index", "dfa": TRAP, "vocab": LONG_VOCAB,
                           "eos_id": LONG_EOS}
    tasks["index_one_state"] = {"kind": "mask_index", "dfa": ONE_STATE, "vocab": LONG_VOCAB,
                                "eos_id": LONG_EOS}
    return tasks


@pytest.fixture(scope="module")
def outcomes(launch):
    return run_tasks(launch, build())


def live(d: dict) -> set[int]:
    """States that reach an accepting state: grow the set until nothing changes."""
    alive = set(d["accepting"])
    while True:
        more = {s for s, row in enumerate(d["transitions"]) if set(row.values()) & alive}
        if more <= alive:
            return alive
        alive |= more


def walk(d: dict, state: int, text: str) -> tuple[int | None, int]:
    """(end state or None, how many characters had a transition)."""
    for i, char in enumerate(text):
        nxt = d["transitions"][state].get(char)
        if nxt is None:
            return None, i
        state = nxt
    return state, len(text)


def reference(d: dict, state: int, vocab: list[str], eos: int) -> list[bool]:
    alive = live(d)
    out = []
    for t, text in enumerate(vocab):
        if t == eos:
            out.append(state in d["accepting"])
            continue
        end, _ = walk(d, state, text)
        out.append(bool(text) and end is not None and end in alive)
    return out


def why(d: dict, state: int, vocab: list[str], eos: int, t: int, got: bool) -> str:
    """The cause of a wrong mask entry, for the first line."""
    text = vocab[t]
    if t == eos:
        return (f"EOS is allowed exactly in accepting states: state {state} is "
                f"{'' if state in d['accepting'] else 'not '}accepting")
    if not got:
        return (f"the token {text!r} has a transition for every character from state {state} "
                f"and an accepting state is reachable after it: allow it")
    if not text:
        return "an empty token string is never allowed (it would not advance the DFA)"
    end, ok = walk(d, state, text)
    if end is None and ok >= 1:
        return (f"the token {text!r} has no transition at its character {ok} from state "
                f"{state}: check every character of a token, not only the first")
    if end is None:
        return f"the token {text!r} has no transition for {text[0]!r} from state {state}"
    return (f"the token {text!r} leads from state {state} into a dead end (state {end}, from "
            f"which no accepting state is reachable): mask it")


def judge(rows: object, d: dict, vocab: list[str], eos: int, what: str,
          columns: list[int] | None = None) -> None:
    states = len(d["transitions"])
    assert isinstance(rows, list) or hasattr(rows, "shape"), f"{what}: got {rows!r:.80}"
    got = [[bool(v) for v in row] for row in rows.tolist()]  # type: ignore[attr-defined]
    assert len(got) == states and all(len(row) == len(vocab) for row in got), (
        f"{what}: expected a bool tensor [{states}, {len(vocab)}] (one row per state, one "
        f"column per token)")
    for state in range(states):
        want = reference(d, state, vocab, eos)
        for t in columns if columns is not None else range(len(vocab)):
            if got[state][t] != want[t]:
                raise AssertionError(
                    f"{what}: {why(d, state, vocab, eos, t, got[state][t])} (token {t} "
                    f"{'allowed' if got[state][t] else 'masked'} in state {state})")


def masks(outcomes: dict, name: str) -> object:
    return value(outcomes, name, "token_mask")


@pytest.mark.points(2)
@pytest.mark.exercises("token_mask")
def test_eos_only_in_accepting_states(outcomes):
    for name, (d, vocab, eos) in CASES.items():
        judge(masks(outcomes, name), d, vocab, eos, f"token_mask ({name} DFA)", [eos])


@pytest.mark.points(2)
@pytest.mark.exercises("token_mask")
def test_single_character_tokens_on_a_hand_made_dfa(outcomes):
    d, vocab, eos = CASES["hand"]
    judge(masks(outcomes, "hand"), d, vocab, eos, "token_mask (hand-made DFA, 1-char tokens)")


@pytest.mark.points(3)
@pytest.mark.exercises("token_mask")
def test_multi_character_tokens_cross_states(outcomes):
    d, vocab, eos = CASES["hand_long"]
    judge(masks(outcomes, "hand_long"), d, vocab, eos,
          "token_mask (hand-made DFA, tokens of 1-3 characters)")
    for name in RANDOM:
        d, vocab, eos = CASES[name]
        judge(masks(outcomes, name), d, vocab, eos, f"token_mask ({name} DFA)")


@pytest.mark.points(3)
@pytest.mark.exercises("token_mask")
def test_no_token_leads_into_a_trap_state(outcomes):
    d, vocab, eos = CASES["trap"]
    judge(masks(outcomes, "trap"), d, vocab, eos, "token_mask (DFA with a trap state)")


@pytest.mark.points(2)
@pytest.mark.exercises("mask_index")
def test_mask_index_stacks_every_state(outcomes):
    for name, d in (("index", RANDOM["random_402"]), ("index_trap", TRAP),
                    ("index_one_state", ONE_STATE)):
        judge(value(outcomes, name, "mask_index"), d, LONG_VOCAB, LONG_EOS,
              f"mask_index ({name})")

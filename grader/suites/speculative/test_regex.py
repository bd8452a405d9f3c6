"""compile_regex: the language of the returned DFA against Python's re.fullmatch, on every
string over a small alphabet up to a length, operator by operator; then the syntax errors.

The DFA comes back as plain data (start, accepting, transitions) and is run here; its states
may be numbered in any way and need not be minimal.
"""

from __future__ import annotations

import itertools
import re

import pytest

from grader.suites.speculative._cases import raises, run_tasks, value

MAX_LEN = 5
GROUPS = {  # name: (alphabet, patterns, hint)
    "literals": ("abc", ["abc", "", "a", "ba", "cab"],
                 "a literal matches itself; concatenation matches one part after the other; "
                 "the empty pattern matches only the empty string"),
    "star": ("abc", ["a*", "ab*c", "(ab)*", "a*b*", "c(a|b)*"],
             "r* matches zero or more repetitions of r: zero too, so the empty string where r* "
             "stands alone (an epsilon edge around r, and one back from its end to its start)"),
    "plus": ("abc", ["a+", "(ab)+c", "a+b+", "(a|bc)+"],
             "r+ matches one or more repetitions of r: at least one, then any number"),
    "question": ("abc", ["ab?c", "(ab)?c", "a?", "(a|b)?c?"],
                 "r? matches r or the empty string, never r twice"),
    "alternation": ("abc", ["a|b", "ab|c", "a|", "(a|b)c|ca", "|a", "a|b|c|"],
                    "| has the lowest precedence (ab|c is (ab)|(c)); an empty alternative "
                    "matches the empty string"),
    "classes_and_dot": ("abcd-", ["[ab]c", "[a-c]+", ".", "a.c", ".*d", "[a-bd]*", "[a-a]b",
                                  "[a-]b", "[-a]+"],
                        "[..] is one character of the set (a-c is a range, a '-' first or last "
                        "is literal); . is any one character of the alphabet"),
    "nested_groups": ("abc", ["((a|b)c)*", "(a(b|c)*)+", "(a|b)*abb", "((ab)?c)+"],
                      "a group is one atom: a postfix operator after it repeats all of it"),
    "escapes": ("ab.*(", ["\\.", "a\\*", "a.\\.", "[.]b", "\\(a*", "[\\.a]+", "[(-\\*]b"],
                "\\c is the character c, also for a metacharacter; inside [..] . and * are "
                "literal"),
}
ERRORS = ["(a", "a)", "*a", "a|*", "(+a)", "[ab", "[]", "[^a]", "[c-a]", "[c-ab]", "a\\", "]",
          "[a\\", "[a-\\", "[a-"]


def build() -> dict[str, dict]:
    tasks = {f"{name}/{i}": {"kind": "compile", "pattern": pattern, "alphabet": alphabet}
             for name, (alphabet, patterns, _) in GROUPS.items()
             for i, pattern in enumerate(patterns)}
    tasks.update({f"error/{i}": raises("constrained", "compile_regex", pattern, "abc")
                  for i, pattern in enumerate(ERRORS)})
    return tasks


@pytest.fixture(scope="module")
def outcomes(launch):
    return run_tasks(launch, build())


def accepts(dfa: dict, text: str) -> bool:
    state = dfa["start"]
    for char in text:
        state = dfa["transitions"][state].get(char)
        if state is None:
            return False
    return state in dfa["accepting"]


def judge(outcomes: dict, name: str) -> None:
    alphabet, patterns, hint = GROUPS[name]
    strings = ["".join(chars) for n in range(MAX_LEN + 1)
               for chars in itertools.product(alphabet, repeat=n)]
    for i, pattern in enumerate(patterns):
        dfa = value(outcomes, f"{name}/{i}", f"compile_regex({pattern!r})")
        assert isinstance(dfa, dict) and isinstance(dfa.get("transitions"), list), (
            f"compile_regex({pattern!r}) must return an automata.DFA")
        for text in strings:
            want = re.fullmatch(pattern, text) is not None
            got = accepts(dfa, text)
            assert got == want, (
                f"compile_regex({pattern!r}): {hint} -- the DFA "
                f"{'accepts' if got else 'rejects'} {text!r}, re.fullmatch "
                f"{'matches' if want else 'does not match'} it")


@pytest.mark.points(1)
@pytest.mark.exercises("compile_regex")
def test_literals_and_concatenation(outcomes):
    judge(outcomes, "literals")


@pytest.mark.points(2)
@pytest.mark.exercises("compile_regex")
def test_star_matches_zero_or_more(outcomes):
    judge(outcomes, "star")


@pytest.mark.points(1)
@pytest.mark.exercises("compile_regex")
def test_plus_matches_one_or_more(outcomes):
    judge(outcomes, "plus")


@pytest.mark.points(1)
@pytest.mark.exercises("compile_regex")
def test_question_mark_is_optional(outcomes):
    judge(outcomes, "question")


@pytest.mark.points(2)
@pytest.mark.exercises("compile_regex")
def test_alternation_and_its_precedence(outcomes):
    judge(outcomes, "alternation")


@pytest.mark.points(2)
@pytest.mark.exercises("compile_regex")
def test_classes_ranges_and_dot(outcomes):
    judge(outcomes, "classes_and_dot")


@pytest.mark.points(1)
@pytest.mark.exercises("compile_regex")
def test_nested_groups_under_operators(outcomes):
    judge(outcomes, "nested_groups")


@pytest.mark.points(1)
@pytest.mark.exercises("compile_regex")
def test_escapes_and_syntax_errors(outcomes):
    judge(outcomes, "escapes")
    for i, pattern in enumerate(ERRORS):
        got = value(outcomes, f"error/{i}", f"compile_regex({pattern!r})")
        assert got == "ValueError", (
            f"compile_regex({pattern!r}) must raise ValueError (README §6 lists the syntax "
            f"errors); got {got}")

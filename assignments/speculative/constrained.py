"""Constrained decoding: a regular expression, its DFA, and per-state token masks (README §6-§7).
You edit this file.
"""

from __future__ import annotations

import torch

from assignments.speculative.automata import DFA
from assignments.speculative.lm import CausalLM, next_token_probs  # noqa: F401


def compile_regex(pattern: str, alphabet: str) -> DFA:
    """The DFA of `pattern` (Thompson NFA, then the subset construction; README §6).

    The syntax, a subset of Python's `re` (the DFA accepts a string iff re.fullmatch would):
      c          a literal character: anything but the metacharacters  . * + ? | ( ) [ ] \\
      \\c         the character c taken literally, for any c (for a metacharacter this is
                 what re does; Python's letter escapes such as \\d are not in the subset)
      .          any one character of `alphabet`
      [abc]      one of the listed characters; ranges such as [a-z0-9]; inside brackets every
                 character but ] \\ and a '-' between two characters is literal, and \\c is c
      (r)        a group; () matches the empty string
      r*  r+  r? zero or more, one or more, zero or one of the preceding atom (a literal, ., a
                 class or a group); they may be stacked (a*? is (a*)?)
      r|s        either; the empty alternative is allowed (a| matches "a" or "")
    Precedence: postfix operators bind tightest, then concatenation, then |.
    The empty pattern matches only the empty string. Characters of the pattern need not be in
    `alphabet`; `alphabet` only says what `.` matches.

    Errors (ValueError): an unbalanced ( or ), a ] outside brackets, a postfix operator with
    nothing before it (at the start, after ( or |), an unterminated or empty [...], a class
    that starts with ^ (negated classes are not in the subset), a reversed range [z-a], and a
    trailing backslash.

    Returns a DFA (automata.DFA) whose states need not be minimal or numbered in any order;
    it may contain states from which no accepting state is reachable.
    """
    raise NotImplementedError("compile_regex: see README §6")


def token_mask(dfa: DFA, state: int, vocab: list[str], eos_id: int) -> torch.Tensor:
    """Which tokens may come next in DFA state `state` (README §7): a bool tensor [len(vocab)].

    Token t != eos_id is allowed iff its string is not empty, running the DFA over every
    character of it from `state` never meets a missing transition, and from the state it ends
    in some accepting state is reachable (itself included): no token may lead into a dead end.
    The end-of-sequence token eos_id (its string is ignored) is allowed iff `state` is
    accepting. The result does not depend on anything else (unique for a given DFA, state,
    vocab and eos_id).
    """
    raise NotImplementedError("token_mask: see README §7")


def mask_index(dfa: DFA, vocab: list[str], eos_id: int) -> torch.Tensor:
    """Every state's mask precomputed: a bool tensor [dfa.num_states, len(vocab)] whose row s
    equals token_mask(dfa, s, vocab, eos_id) (README §7)."""
    raise NotImplementedError("mask_index: see README §7")


def constrained_generate(model: CausalLM, prompt: torch.Tensor, pattern: str, vocab: list[str],
                         eos_id: int, max_new_tokens: int, generator: torch.Generator
                         ) -> torch.Tensor:
    """Sample tokens whose text matches `pattern` (README §7).

    model has vocab_size == len(vocab); its cache is reset at the start. The DFA is
    compile_regex(pattern, alphabet) with alphabet every character of the vocabulary's strings
    except eos_id's. From the DFA's start state, each step takes the model's distribution
    next_token_probs(logits, 1.0) after prompt + the tokens so far, sets every token outside
    token_mask(dfa, state, vocab, eos_id) to 0, renormalises, samples one token from
    `generator` and advances the DFA over the token's string. It stops when eos_id is sampled
    or max_new_tokens tokens have been generated, whichever comes first.

    Returns the generated token ids (1-D long), without the eos_id token. If it stopped on
    eos_id, the concatenated strings fully match `pattern`. If the current state's mask is
    empty (the vocabulary cannot spell any continuation that matches), it raises ValueError.
    """
    raise NotImplementedError("constrained_generate: see README §7")

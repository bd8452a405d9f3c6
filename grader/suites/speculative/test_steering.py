"""constrained_generate: every finished output matches the pattern, and the outputs follow the
model's distribution restricted to the mask and renormalised at each step (README §7).

The pattern's language is finite, so the parent lists it with re.fullmatch and needs no DFA: a
token may follow the text s iff s + token is a prefix of some match, EOS iff s matches. Exact
probabilities of every output come from a fresh model fed the whole sequence at each step; the
sampled outputs are judged by total variation (bound in `_common`).
"""

from __future__ import annotations

import itertools
import re

import pytest
import torch

from grader.suites.speculative._cases import raises, run_tasks, seed, tiny, value
from grader.suites.speculative._ref import judge_distribution, next_probs, tokens_list

VOCAB = ["a", "b", "c", "d", "ab", "bc", "cd", "x", "<eos>", "abcd"]
EOS = 8
PATTERN = "(ab|a)(c|bc)?d"
MODEL = tiny(len(VOCAB), 31, scale=1.0)
PROMPT = [0, 3]
MAX_NEW = 12
TRIALS = 1000


def language() -> set[str]:
    return {"".join(chars) for n in range(1, 7) for chars in itertools.product("abcdx", repeat=n)
            if re.fullmatch(PATTERN, "".join(chars))}


def exact() -> dict[tuple[int, ...], float]:
    """Every output (tokens without EOS) with its probability under the masked model."""
    words = language()
    prefixes = {w[:i] for w in words for i in range(len(w) + 1)}
    out: dict[tuple[int, ...], float] = {}
    pending: list[tuple[tuple[int, ...], str, float]] = [((), "", 1.0)]
    while pending:
        tokens, text, mass = pending.pop()
        probs = next_probs(MODEL, PROMPT + list(tokens), 1.0)
        allowed = [t for t, s in enumerate(VOCAB)
                   if (t == EOS and text in words) or (t != EOS and s and text + s in prefixes)]
        total = float(sum(probs[t] for t in allowed))
        for t in allowed:
            share = mass * float(probs[t]) / total
            if t == EOS:
                out[tokens] = out.get(tokens, 0.0) + share
            else:
                pending.append(((*tokens, t), text + VOCAB[t], share))
    return out


DOT_PATTERN = ".b(c|d)"  # '.' is any character of the vocabulary's strings
DOT_TRIALS = 40
CAPPED_PATTERN, CAPPED_NEW = "[ab]*", 3  # never has to end: max_new_tokens stops it


@pytest.fixture(scope="module")
def outcomes(launch):
    common = {"kind": "constrained_trials", "model": MODEL, "prompt": PROMPT, "vocab": VOCAB,
              "eos_id": EOS, "max_new_tokens": MAX_NEW}
    return run_tasks(launch, {
        "runs": {**common, "pattern": PATTERN, "trials": TRIALS, "seed": seed(501)},
        "dot": {**common, "pattern": DOT_PATTERN, "trials": DOT_TRIALS, "seed": seed(502)},
        "capped": {**common, "pattern": CAPPED_PATTERN, "max_new_tokens": CAPPED_NEW,
                   "trials": DOT_TRIALS, "seed": seed(503)},
        "none": {**common, "pattern": PATTERN, "max_new_tokens": 0, "trials": 1,
                 "seed": seed(504)},
        "unspellable": {**raises("constrained", "constrained_generate", None,
                                 torch.tensor(PROMPT), "ab(c|z)z", VOCAB, EOS, MAX_NEW,
                                 torch.Generator()), "model": MODEL}})


def outputs(outcomes: dict, name: str = "runs") -> list[tuple[int, ...]]:
    rows = value(outcomes, name, "constrained_generate")
    return [tuple(tokens_list(row, "constrained_generate")) for row in rows]


@pytest.mark.points(4)
@pytest.mark.exercises("constrained_generate")
def test_every_finished_output_matches_the_pattern(outcomes):
    for pattern, row in [(PATTERN, r) for r in outputs(outcomes)] + \
            [(DOT_PATTERN, r) for r in outputs(outcomes, "dot")]:
        assert all(0 <= t < len(VOCAB) and t != EOS for t in row), (
            f"constrained_generate returned {list(row)}: token ids of the vocabulary, without "
            f"the EOS token")
        text = "".join(VOCAB[t] for t in row)
        assert len(row) < MAX_NEW and re.fullmatch(pattern, text), (
            f"constrained_generate({pattern!r}) produced {text!r} ({len(row)} tokens), which "
            f"does not fully match: sample only tokens of the mask of the current DFA state "
            f"(EOS only where it accepts) and advance the state over the whole token")
    for row in outputs(outcomes, "capped"):
        text = "".join(VOCAB[t] for t in row if 0 <= t < len(VOCAB))
        assert len(row) <= CAPPED_NEW and re.fullmatch(CAPPED_PATTERN, text), (
            f"constrained_generate({CAPPED_PATTERN!r}, max_new_tokens={CAPPED_NEW}) returned "
            f"{len(row)} tokens ({text!r}): stop once max_new_tokens tokens are generated, "
            f"each from the mask")
    assert outputs(outcomes, "none") == [()], (
        "constrained_generate with max_new_tokens=0 must return no tokens")
    got = value(outcomes, "unspellable", "constrained_generate")
    assert str(got).startswith("ValueError"), (
        f"constrained_generate('ab(c|z)z') with a vocabulary that has no 'z': expected "
        f"ValueError once the current state's mask is empty, got {got}")


@pytest.mark.points(5)
@pytest.mark.exercises("constrained_generate")
def test_outputs_follow_the_masked_renormalised_model(outcomes):
    judge_distribution(outputs(outcomes), exact(),
                       f"constrained_generate({PATTERN!r}) over {TRIALS} runs",
                       "each step samples from the model's probabilities after prompt + the "
                       "tokens so far, zeroed outside the mask and renormalised")



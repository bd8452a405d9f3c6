"""The corpus of the learning test, and byte-level tokens (README §9). Provided: do not edit.

`corpus.txt` (about 100 KB, shipped beside this file) is English-like text from a small
generated grammar: subjects, verbs, objects and places from short word lists, joined into
sentences with a few fixed patterns. A model that knows the word lists and the patterns can
predict most characters; one that has learnt nothing pays ln 256 = 5.55 nats per byte.

    text = load_corpus()
    tokens = encode(text)          # torch.long, one token per byte, vocab_size 256
    decode(tokens[:40])            # back to text

`make_corpus(seed, sentences)` is the generator that wrote corpus.txt (seed 0, 2400 sentences).
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

CORPUS = Path(__file__).with_name("corpus.txt")
VOCAB_SIZE = 256

_ADJECTIVES = ("old", "young", "small", "quiet", "red", "brave", "tired", "clever", "green")
_NOUNS = ("dog", "cat", "bird", "farmer", "child", "teacher", "river", "boat", "horse", "king")
_VERBS = ("sees", "follows", "helps", "finds", "watches", "carries", "calls", "meets")
_PLACES = ("near the mill", "in the garden", "by the old bridge", "at the market",
           "under the tall tree", "on the hill")
_TIMES = ("in the morning", "at night", "every day", "after the rain")


def _phrase(rng: random.Random) -> str:
    article = rng.choice(("the", "a"))
    if rng.random() < 0.5:
        return f"{article} {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}"
    return f"{article} {rng.choice(_NOUNS)}"


def _sentence(rng: random.Random) -> str:
    pattern = rng.randrange(4)
    subject, obj = _phrase(rng), _phrase(rng)
    verb = rng.choice(_VERBS)
    if pattern == 0:
        text = f"{subject} {verb} {obj}"
    elif pattern == 1:
        text = f"{subject} {verb} {obj} {rng.choice(_PLACES)}"
    elif pattern == 2:
        text = f"{rng.choice(_TIMES)} {subject} {verb} {obj}"
    else:
        text = f"{subject} {verb} {obj} and {_phrase(rng)} {rng.choice(_VERBS)} it"
    return text[0].upper() + text[1:] + "."


def make_corpus(seed: int = 0, sentences: int = 2400) -> str:
    """`sentences` sentences of the grammar, ten to a line; the same text for the same seed."""
    rng = random.Random(seed)
    lines = []
    for start in range(0, sentences, 10):
        lines.append(" ".join(_sentence(rng) for _ in range(min(10, sentences - start))))
    return "\n".join(lines) + "\n"


def load_corpus() -> str:
    """The shipped corpus.txt as text."""
    return CORPUS.read_text(encoding="utf-8")


def encode(text: str) -> torch.Tensor:
    """One token per UTF-8 byte: a 1-D torch.long tensor of values in [0, 256)."""
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)


def decode(tokens: torch.Tensor) -> str:
    """The text of a 1-D tensor of byte tokens (invalid UTF-8 shown as U+FFFD)."""
    return bytes(int(t) for t in tokens.tolist()).decode("utf-8", errors="replace")

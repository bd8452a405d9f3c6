"""Random workloads and radix-cache operation sequences, drawn with hypothesis in the parent.

Hypothesis draws integers (derandomized, no example database, a small fixed number of
examples), and each integer seeds a `random.Random` that builds one workload or sequence, so
the draws are the same on every run and the suite stays cheap. Hypothesis only generates
here; the examples are batched into one launch and judged afterwards (no shrinking).
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from assignments.serving.model import VOCAB_SIZE

# Hypothesis may draw integer literals it finds in loaded modules' source, which differ with
# what is loaded; drawing from a range no literal falls in keeps the draws the same.
DRAW_OFFSET = 5 * 10**40


def draw_ints(count: int) -> list[int]:
    """`count` integers, the same ones on every run."""
    drawn: list[int] = []

    @settings(max_examples=count, database=None, deadline=None, derandomize=True,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(st.integers(DRAW_OFFSET, DRAW_OFFSET + 2**48))
    def collect(value: int) -> None:
        if len(drawn) < count:
            drawn.append(value - DRAW_OFFSET)

    collect()
    while len(drawn) < count:  # hypothesis may stop early on a tiny space; never here
        drawn.append(len(drawn))
    return drawn


def workload(seed: int, n: int, *, prompt: tuple[int, int] = (1, 20),
             max_tokens: tuple[int, int] = (1, 14), shared: int = 0, stop: float = 0.3,
             sampled: float = 0.3) -> list[dict]:
    """n request specs: prompts of `shared` common tokens plus a random tail, random limits,
    some with a stop token, some sampled at temperature 0.7."""
    rng = random.Random(seed)
    system = [rng.randrange(VOCAB_SIZE) for _ in range(shared)]
    out = []
    for i in range(n):
        tail = [rng.randrange(VOCAB_SIZE) for _ in range(rng.randint(*prompt))]
        out.append({"request_id": i, "prompt": system + tail,
                    "max_tokens": rng.randint(*max_tokens),
                    "stop_token": rng.randrange(VOCAB_SIZE) if rng.random() < stop else None,
                    "temperature": 0.7 if rng.random() < sampled else 0.0,
                    "seed": rng.randrange(1000)})
    return out


def radix_ops(seed: int, count: int, alphabet: int = 3) -> list[tuple]:
    """Operations on a RadixCache: insert / match / lock (match + inc_ref) / unlock (dec_ref
    of a held node) / evict, over short sequences of a few distinct tokens (so prefixes are
    shared and edges split often); it ends by releasing every node still held and evicting
    everything, after which the tree must be empty (a reference left behind on the lower part
    of a split shows there)."""
    rng = random.Random(seed)
    ops: list[tuple] = []
    held = 0

    def seq() -> list[int]:
        return [rng.randrange(alphabet) for _ in range(rng.randint(1, 7))]

    for _ in range(count):
        roll = rng.random()
        if roll < 0.35:
            ops.append(("insert", seq()))
        elif roll < 0.55:
            ops.append(("match", seq()))
        elif roll < 0.65:
            ops.append(("lock", seq()))
            held += 1
        elif roll < 0.75 and held:
            ops.append(("unlock", rng.randrange(held)))
            held -= 1
        else:
            ops.append(("evict", rng.randint(1, 6)))
    ops += [("unlock", 0)] * held + [("evict", 1 << 20)]
    return ops

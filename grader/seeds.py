"""Seeds of the inputs the suites generate, and the shift that selfcheck's margin runs apply.

A suite builds its inputs in the parent from fixed seeds, so a grade is reproducible. The
tolerances must not depend on those particular inputs, though: `python -m grader selfcheck`
also runs each solution with every seed shifted (`pytest --seed-shift K`, set by the plugin),
and a comparison that only holds for the original draw shows up as a margin breach there.

    gen = seeded_generator(40)          # instead of torch.Generator().manual_seed(40)
    torch.manual_seed(shifted(seed))    # where a module's init draws from the global generator

Seeds that travel to a rank (a spec's "seed" the rank rebuilds a model from) are shifted once,
where the parent makes the spec, so parent and rank agree.
"""

from __future__ import annotations

import os
from typing import Any

import torch

# The shift travels in the environment so that rank processes (which rebuild a model from a
# seed the parent sent) draw the same numbers as the parent that computes the reference.
SHIFT_VARIABLE = "MLSYS_SEED_SHIFT"
_STRIDE = 7919  # a prime: shifted seeds of nearby bases never collide for small shifts


def set_shift(shift: int) -> None:
    """Shift every seed of this process by `shift` (0, the default, grades as published)."""
    if not isinstance(shift, int) or isinstance(shift, bool) or shift < 0:
        raise ValueError(f"the seed shift must be a non-negative int, not {shift!r}")
    os.environ[SHIFT_VARIABLE] = str(shift)


def current_shift() -> int:
    text = os.environ.get(SHIFT_VARIABLE, "0")
    return int(text) if text.isdigit() else 0


def shifted(seed: int) -> int:
    """`seed` as this session uses it: unchanged unless selfcheck shifts seeds."""
    return seed + current_shift() * _STRIDE


def seeded_generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with `shifted(seed)`."""
    return torch.Generator().manual_seed(shifted(seed))


# Hypothesis may draw integer literals it finds in loaded modules' source, and which modules are
# loaded differs between sessions; integers drawn from a range no literal falls in (the offset
# removed) keep the examples the same in every session.
DRAW_OFFSET = 7 * 10**40


def drawn_integers() -> Any:
    """A hypothesis strategy of non-negative integers below 2**40 that draws the same in every
    session (see `DRAW_OFFSET`)."""
    from hypothesis import strategies as st

    return st.integers(DRAW_OFFSET, DRAW_OFFSET + 2**40 - 1).map(lambda v: v - DRAW_OFFSET)


def hypothesis_examples(strategy: Any, count: int, seed: int) -> list[Any]:
    """`count` examples of `strategy`, drawn in the parent with hypothesis from `shifted(seed)`:
    the same on every run. Hypothesis only generates here (no shrinking, no database); a suite
    batches the examples into one launch and judges them afterwards."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    drawn: list[Any] = []

    @hypothesis_seed(shifted(seed))
    @settings(max_examples=count, database=None, deadline=None, derandomize=False,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(example: Any) -> None:
        drawn.append(example)

    collect()
    return drawn

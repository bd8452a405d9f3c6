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

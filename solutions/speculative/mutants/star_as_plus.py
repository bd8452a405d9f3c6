"""Compiles r* like r+: without the epsilon edge that skips r, zero repetitions never match."""
from harness.mutation import mutate

MUTATES = "constrained"
FEEDBACK = "zero"
mutate(globals(), "speculative", "constrained", replace=[
    ('            if op in "*?":', '            if op in "?":'),
])

"""Allows every token whose characters all have transitions, even when it ends in a state from
which no accepting state is reachable: generation can walk into a dead end and never finish."""
from harness.mutation import mutate

MUTATES = "constrained"
FEEDBACK = "dead end"
mutate(globals(), "speculative", "constrained", replace=[
    ("        mask[t] = end is not None and end in live",
     "        mask[t] = end is not None"),
])

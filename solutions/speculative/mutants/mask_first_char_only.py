"""Judges a token by its first character only: a multi-character token that leaves the language
after its first character is allowed."""
from harness.mutation import mutate

MUTATES = "constrained"
FEEDBACK = "every character"
mutate(globals(), "speculative", "constrained", replace=[
    ("        end = dfa.run(state, text) if text else None",
     "        end = dfa.run(state, text[:1]) if text else None"),
])

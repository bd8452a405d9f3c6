"""Rolls the target's cache back to len(seq) instead of len(seq) - 1 after a round: after a
rejection the cache keeps the rejected draft token's key and value where the token drawn in
its place belongs, and every later prediction attends to it."""
from harness.mutation import mutate

MUTATES = "speculative"
FEEDBACK = "rejected draft token"
mutate(globals(), "speculative", "speculative", replace=[
    ("        target.rollback(kept)",
     "        target.rollback(min(target.cache_len, kept + 1))"),
])

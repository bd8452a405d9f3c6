"""Accepts a draft token iff p >= q instead of with probability min(1, p/q): the greedy
intuition. Outputs stay well-formed, but every token with p < q is always rejected, so the
emitted distribution leans towards the residual."""
from harness.mutation import mutate

MUTATES = "speculative"
FEEDBACK = "min(1, p/q)"
mutate(globals(), "speculative", "speculative", replace=[
    ("        if u * q < p:", "        if p >= q:"),
])

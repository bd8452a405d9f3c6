"""Always allows the end-of-sequence token: generation may stop in a state that does not
accept, leaving a string that does not match."""
from harness.mutation import mutate

MUTATES = "constrained"
FEEDBACK = "accepting states"
mutate(globals(), "speculative", "constrained", replace=[
    ("            mask[t] = state in dfa.accepting", "            mask[t] = True"),
])

"""Counts only the accepted drafts, (1 - alpha**k) / (1 - alpha), forgetting the token every
round emits from the target (the correction or the bonus)."""
from harness.mutation import mutate

MUTATES = "speculative"
FEEDBACK = "alpha**(k+1)"
mutate(globals(), "speculative", "speculative", replace=[
    ("    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)",
     "    return (1.0 - alpha ** k) / (1.0 - alpha)"),
])

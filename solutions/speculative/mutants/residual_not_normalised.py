"""Clamps the residual but never divides by its sum: the CDF of max(0, p - q) ends below 1, and
every uniform draw above it lands on the last token."""
from harness.mutation import mutate

MUTATES = "speculative"
FEEDBACK = ("normalise", "divide by the sum")
mutate(globals(), "speculative", "speculative", replace=[
    ("        residual = residual / total if total > 0 else target_probs[i].to(_F64)",
     "        residual = residual if total > 0 else target_probs[i].to(_F64)"),
])

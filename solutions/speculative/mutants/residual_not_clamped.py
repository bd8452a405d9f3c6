"""Draws the token after a rejection from normalise(p - q) without clamping at 0: p - q sums to
0, so the division gives nan and the CDF inversion falls off the end."""
from harness.mutation import mutate

MUTATES = "speculative"
FEEDBACK = "max(0, p - q)"
mutate(globals(), "speculative", "speculative", replace=[
    ("        residual = torch.clamp(target_probs[i].to(_F64) - draft_probs[i].to(_F64), min=0.0)",
     "        residual = target_probs[i].to(_F64) - draft_probs[i].to(_F64)"),
    ("        residual = residual / total if total > 0 else target_probs[i].to(_F64)",
     "        residual = residual / total"),
])

"""Sums max(p, q) instead of min(p, q): 1 + TV instead of 1 - TV."""
from harness.mutation import mutate

MUTATES = "speculative"
FEEDBACK = "min(p, q)"
mutate(globals(), "speculative", "speculative", replace=[
    ("    return torch.minimum(draft_probs.to(_F64), target_probs.to(_F64)).sum(dim=-1)",
     "    return torch.maximum(draft_probs.to(_F64), target_probs.to(_F64)).sum(dim=-1)"),
])

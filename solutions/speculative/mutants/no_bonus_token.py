"""Returns just the accepted drafts when all k are accepted: the free bonus token from the
target's last row is lost (and k = 0 returns nothing at all)."""
from harness.mutation import mutate

MUTATES = "speculative"
FEEDBACK = "bonus token"
mutate(globals(), "speculative", "speculative", replace=[
    ("    out.append(_draw(target_probs[k].to(_F64), generator))\n", ""),
])

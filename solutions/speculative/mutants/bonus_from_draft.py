"""Draws the bonus token from the last draft row instead of the target's row after the last
draft: the bonus token then follows the draft's distribution."""
from harness.mutation import mutate

MUTATES = "speculative"
FEEDBACK = "target_probs[k]"
mutate(globals(), "speculative", "speculative", replace=[
    ("    out.append(_draw(target_probs[k].to(_F64), generator))",
     "    out.append(_draw(draft_probs[k - 1].to(_F64), generator))"),
])

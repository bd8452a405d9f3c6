"""Activations with recomputation still counted at 34·s·b·h per layer: no discount."""
from harness.mutation import mutate

MUTATES = "planner"
FEEDBACK = ("recompute", "discount")
mutate(globals(), "nd_parallel", "planner", replace=[
    ("    factor = ACT_FACTOR_RECOMPUTE if layout.recompute else ACT_FACTOR\n",
     "    factor = ACT_FACTOR\n"),
])

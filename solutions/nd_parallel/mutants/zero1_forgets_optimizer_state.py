"""The planner drops the optimizer state under ZeRO-1 instead of sharding it over DP."""
from harness.mutation import mutate

MUTATES = "planner"
FEEDBACK = "optimizer state"
mutate(globals(), "nd_parallel", "planner", replace=[
    ("    optimizer = OPTIMIZER_BYTES * local / (d if layout.zero >= 1 else 1)\n",
     "    optimizer = 0.0 if layout.zero >= 1 else OPTIMIZER_BYTES * local\n"),
])

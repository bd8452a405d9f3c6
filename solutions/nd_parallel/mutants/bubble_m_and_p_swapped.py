"""The pipeline bubble with m and p swapped: (m - 1)/(m + p - 1)."""
from harness.mutation import mutate

MUTATES = "planner"
FEEDBACK = ("bubble", "not swapped")
mutate(globals(), "nd_parallel", "planner", replace=[
    ("    return (pp - 1) / (micro_batches + pp - 1)\n",
     "    return (micro_batches - 1) / (micro_batches + pp - 1)\n"),
])

"""Splits the layers into stages of (almost) equal layer counts, whatever they cost."""
from harness.mutation import mutate

MUTATES = "pipeline"
FEEDBACK = "cost"
mutate(globals(), "pipeline", "pipeline", replace=[
    ("    prefix = [0.0]\n",
     "    base, extra = divmod(n, num_stages)\n"
     "    sizes = [base + (1 if s < extra else 0) for s in range(num_stages)]\n"
     "    starts = [sum(sizes[:s]) for s in range(num_stages)]\n"
     "    return [(a, a + size) for a, size in zip(starts, sizes)]\n"
     "    prefix = [0.0]\n"),
])

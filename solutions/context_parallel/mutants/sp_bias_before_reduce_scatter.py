"""b2 is added before the reduce-scatter, so the sum over ranks counts it N times."""
from harness.mutation import mutate

MUTATES = "cp"
FEEDBACK = "b2 once"
mutate(globals(), "context_parallel", "cp", replace=[
    ("    h = h @ w2.t()                        # row-parallel: a partial sum over ffn slices",
     "    h = h @ w2.t() + b2"),
    ("    return x + h + b2\n", "    return x + h\n"),
])

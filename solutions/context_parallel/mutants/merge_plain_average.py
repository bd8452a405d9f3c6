"""merge averages the two partial outputs instead of weighting them by their normalisers."""
from harness.mutation import mutate

MUTATES = "cp"
FEEDBACK = "plain average"
mutate(globals(), "context_parallel", "cp", replace=[
    ("    return w_a * out_a + w_b * out_b, lse",
     "    return (out_a + out_b) / 2, lse"),
])

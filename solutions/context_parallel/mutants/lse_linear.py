"""attention_with_lse returns the sum of exp(scores), not its log."""
from harness.mutation import mutate

MUTATES = "cp"
FEEDBACK = "natural log"
mutate(globals(), "context_parallel", "cp", replace=[
    ("    return weights @ v, lse\n", "    return weights @ v, lse.exp()\n"),
])

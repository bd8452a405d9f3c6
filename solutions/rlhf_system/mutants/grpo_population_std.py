"""Normalises GRPO's groups by the population standard deviation (divisor G, not G - 1)."""
from harness.mutation import mutate

MUTATES = "rlhf"
FEEDBACK = "sample standard deviation"
mutate(globals(), "rlhf_system", "rlhf", replace=[
    ("    std = groups.std(dim=1, keepdim=True)  # sample std (divisor group_size - 1)",
     "    std = groups.std(dim=1, keepdim=True, unbiased=False)"),
])

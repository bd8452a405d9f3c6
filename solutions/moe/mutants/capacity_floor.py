"""Capacity rounded down: k*T/E = 2.5 gives 2 slots, and a perfectly balanced batch drops
tokens."""
from harness.mutation import mutate

MUTATES = "moe"
FEEDBACK = "ceil"
mutate(globals(), "moe", "moe", replace=[
    ("    return math.ceil(k * num_tokens * capacity_factor / num_experts)",
     "    return math.floor(k * num_tokens * capacity_factor / num_experts)"),
])

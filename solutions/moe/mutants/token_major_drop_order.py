"""Assignments are walked token by token (token 0's choices, then token 1's, ...): a late token
loses its first choice to an early token's second choice."""
from harness.mutation import mutate

MUTATES = "moe"
FEEDBACK = "first choice comes before any second choice"
mutate(globals(), "moe", "moe", replace=[
    ("    ordered = experts.t().reshape(-1)", "    ordered = experts.reshape(-1)"),
    ("    return keep.reshape(experts.shape[1], experts.shape[0]).t().contiguous()",
     "    return keep.reshape(experts.shape)"),
])

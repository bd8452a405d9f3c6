"""The chosen probabilities are used as they are (Switch-style) although the contract says
Mixtral-style: a token's weights do not sum to 1."""
from harness.mutation import mutate

MUTATES = "moe"
FEEDBACK = "renormalise"
mutate(globals(), "moe", "moe", replace=[
    ("    weights = top / top.sum(dim=-1, keepdim=True)\n", "    weights = top\n"),
])

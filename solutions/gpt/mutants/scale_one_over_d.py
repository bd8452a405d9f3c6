"""Scores scaled by 1/head_dim instead of 1/sqrt(head_dim)."""
from harness.mutation import mutate

MUTATES = "model"
FEEDBACK = "1/sqrt(head_dim)"
mutate(globals(), "gpt", "model", replace=[
    ("* (1.0 / math.sqrt(head_dim))", "* (1.0 / head_dim)"),
])

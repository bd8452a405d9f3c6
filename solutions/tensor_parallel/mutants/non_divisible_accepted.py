"""Sizes the group size does not divide are accepted silently (the remainder is dropped)."""
from harness.mutation import mutate

FEEDBACK = "raise ValueError naming both sizes"
MUTATES = "layers"
mutate(globals(), "tensor_parallel", "layers", replace=[
    ("    if total % tp_size != 0:\n", "    if total < 0:\n"),
])

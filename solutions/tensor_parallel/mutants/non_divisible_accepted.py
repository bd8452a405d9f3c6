"""Sizes the group size does not divide are accepted silently (the remainder is dropped)."""
from harness.mutation import mutate

MUTATES = "layers"
mutate(globals(), "tensor_parallel", "layers", replace=[
    ("    if total % tp_size != 0:\n", "    if total < 0:\n"),
])

"""Cuts row-parallel weights along dim 0, like column-parallel ones."""
from harness.mutation import mutate

MUTATES = "weight_sync"
FEEDBACK = ("row", "dim 1")
mutate(globals(), "rlhf_system", "weight_sync", replace=[
    ('    dim = 0 if kind == "column" else 1', "    dim = 0"),
])

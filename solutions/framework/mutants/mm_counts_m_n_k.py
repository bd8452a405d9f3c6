"""Counts a matrix product as m·n·k: one FLOP per multiply-add instead of two."""
from harness.mutation import mutate

MUTATES = "flops"
FEEDBACK = "multiply-add is 2"
mutate(globals(), "framework", "flops", replace=[
    ("    return 2 * prod(batch) * m * n * k", "    return prod(batch) * m * n * k"),
])

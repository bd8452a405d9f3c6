"""Runs N-2 reduce-scatter steps: every chunk misses one rank's contribution."""
from harness.mutation import mutate

MUTATES = "ring"
FEEDBACK = "N-1 steps per phase"
mutate(globals(), "ring_allreduce", "ring", replace=[
    ("for step in range(n - 1):", "for step in range(n - 2):"),
])

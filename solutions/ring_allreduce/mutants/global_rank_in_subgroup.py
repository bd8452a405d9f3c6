"""Uses the global rank as the position in the ring: wrong peers and chunks in a subgroup."""
from harness.mutation import mutate

MUTATES = "ring"
mutate(globals(), "ring_allreduce", "ring", replace=[
    ("position = dist.get_rank(group)", "position = dist.get_rank()"),
])

"""Uses the global rank as the position in the ring: wrong peers and chunks in a subgroup."""
from harness.mutation import mutate

MUTATES = "ring"
FEEDBACK = ("dist.get_rank(group)", "get_process_group_ranks")
mutate(globals(), "ring_allreduce", "ring", replace=[
    ("position = dist.get_rank(group)", "position = dist.get_rank()"),
])

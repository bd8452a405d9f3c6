"""Rank r takes chunks r and N+r (striped) instead of the mirrored pair r and 2N-1-r."""
from harness.mutation import mutate

MUTATES = "cp"
FEEDBACK = "chunk 2N-1-r"
mutate(globals(), "context_parallel", "cp", replace=[
    ("                       torch.arange((2 * world_size - 1 - r) * chunk,\n"
     "                                    (2 * world_size - r) * chunk)])",
     "                       torch.arange((world_size + r) * chunk,\n"
     "                                    (world_size + r + 1) * chunk)])"),
])

"""Every rank returns (writes) the checkpoint, not rank 0 alone."""
from harness.mutation import mutate

MUTATES = "trainer"
FEEDBACK = "only rank 0 returns"
mutate(globals(), "ddp", "trainer", replace=[
    ("    if rank != 0:\n        return None\n", ""),
])

"""clip_grad_norm_ uses this rank's shard norm: the squares are never summed over ranks."""
from harness.mutation import mutate

MUTATES = "zero"
FEEDBACK = "sum the squares of every rank's shard"
mutate(globals(), "zero2", "zero", replace=[
    ("        self._comm.all_reduce_sum_(local)\n", ""),
])

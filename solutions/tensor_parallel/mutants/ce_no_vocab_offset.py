"""The cross-entropy treats target ids as local to every shard (no vocab start subtracted):
only targets in rank 0's slice are right."""
from harness.mutation import mutate

FEEDBACK = "subtract the shard's vocab start"
MUTATES = "layers"
mutate(globals(), "tensor_parallel", "layers", replace=[
    ("        local_target = target - vocab_start\n",
     "        local_target = target + 0 * vocab_start\n"),
])

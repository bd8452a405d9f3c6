"""The cross-entropy subtracts each shard's own max, not the max over the whole vocabulary."""
from harness.mutation import mutate

FEEDBACK = "subtract the global max"
MUTATES = "layers"
mutate(globals(), "tensor_parallel", "layers", replace=[
    ("        _all_reduce_(logits_max, group, op=dist.ReduceOp.MAX)\n", ""),
])

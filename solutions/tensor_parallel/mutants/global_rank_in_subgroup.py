"""Slices by the global rank instead of the rank inside the tensor-parallel group."""
from harness.mutation import mutate

FEEDBACK = "dist.get_rank(group), not the global rank"
MUTATES = "layers"
mutate(globals(), "tensor_parallel", "layers", replace=[
    ("    return dist.get_rank(group), dist.get_world_size(group)",
     "    return dist.get_rank(), dist.get_world_size(group)"),
])

"""scatter keeps this rank's slice of the FIRST dim instead of the last."""
from harness.mutation import mutate

FEEDBACK = "of the LAST dim"
MUTATES = "layers"
mutate(globals(), "tensor_parallel", "layers", replace=[
    ("        return _my_slice_last_dim(x, group)\n",
     "        return x.chunk(dist.get_world_size(group), dim=0)[dist.get_rank(group)].clone()\n"),
])

"""f's backward passes the gradient through unchanged: the input gradient misses the other ranks'
contributions (column-parallel layers and the MLP get only this rank's share)."""
from harness.mutation import mutate

FEEDBACK = "f's backward all-reduces the gradient"
MUTATES = "layers"
mutate(globals(), "tensor_parallel", "layers", replace=[
    ("        return _all_reduce_(grad.clone(memory_format=torch.contiguous_format), "
     "ctx.group), None",
     "        return grad, None"),
])

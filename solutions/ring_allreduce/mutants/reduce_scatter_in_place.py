"""ring_reduce_scatter reduces into its input instead of a copy: the caller's tensor changes."""
from harness.mutation import mutate

MUTATES = "ring"
FEEDBACK = ("modified its input", "reduce into a copy")
mutate(globals(), "ring_allreduce", "ring", replace=[
    ("    flat = tensor.clone(memory_format=torch.contiguous_format).view(-1)\n",
     "    flat = _as_flat(tensor)\n"),
])

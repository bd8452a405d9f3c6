"""The all-gather concatenates along the first dim instead of the last."""
from harness.mutation import mutate

FEEDBACK = "along the LAST dim"
MUTATES = "layers"
mutate(globals(), "tensor_parallel", "layers", replace=[
    ("    return torch.cat(parts, dim=-1)", "    return torch.cat(parts, dim=0)"),
])

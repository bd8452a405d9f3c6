"""Causal mask lets each query see one future key (j <= i + 1)."""
from harness.mutation import mutate

MUTATES = "kernels"
mutate(globals(), "triton_kernels", "kernels", replace=[
    ("keep = keep & (cols[None, :] <= offs_m[:, None])",
     "keep = keep & (cols[None, :] <= offs_m[:, None] + 1)"),
])

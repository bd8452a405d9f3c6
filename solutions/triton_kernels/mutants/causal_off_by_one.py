"""Causal mask lets each query see one future key (j <= i + 1)."""
from ._source import mutate_kernels

MUTATES = "kernels"
FEEDBACK = 'query i sees keys j <= i'
mutate_kernels(globals(), [
    ("keep = keep & (cols[None, :] <= offs_m[:, None])",
     "keep = keep & (cols[None, :] <= offs_m[:, None] + 1)"),
])

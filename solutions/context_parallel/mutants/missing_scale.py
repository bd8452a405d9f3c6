"""The scores are not scaled by 1/sqrt(dim)."""
from harness.mutation import mutate

MUTATES = "cp"
FEEDBACK = "1/sqrt(dim)"
mutate(globals(), "context_parallel", "cp", replace=[
    ("    scale = 1.0 / math.sqrt(q.shape[-1])\n    scores = (q @ k.transpose(-1, -2)) * scale\n"
     "    if causal:\n        # The mask",
     "    scale = 1.0\n    scores = (q @ k.transpose(-1, -2)) * scale\n"
     "    if causal:\n        # The mask"),
])

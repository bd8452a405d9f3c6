"""Whitens without eps: one valid element (or a constant batch) divides 0 by 0 and gives nan."""
from harness.mutation import mutate

MUTATES = "ppo"
FEEDBACK = "add eps"
mutate(globals(), "ppo", "ppo", replace=[
    ("    whitened = (x - mean) * torch.rsqrt(var + eps)\n",
     "    whitened = (x - mean) * torch.rsqrt(var)\n"),
])

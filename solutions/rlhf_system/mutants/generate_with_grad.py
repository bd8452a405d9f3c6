"""Samples with autograd on: every decode step builds a graph that nobody differentiates."""
from harness.mutation import mutate

MUTATES = "rlhf"
FEEDBACK = "no_grad"
mutate(globals(), "rlhf_system", "rlhf", replace=[
    ("    with torch.no_grad():\n        tokens = prompts[:, None]",
     "    if True:\n        tokens = prompts[:, None]"),
])

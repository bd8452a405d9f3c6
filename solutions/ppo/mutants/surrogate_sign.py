"""Maximises the loss instead of minimising it: the surrogate's sign is flipped."""
from harness.mutation import mutate

MUTATES = "ppo"
FEEDBACK = ("wrong sign", "minimise -A*r")
mutate(globals(), "ppo", "ppo", replace=[
    ("    unclipped = -advantages * ratio\n    clipped = -advantages * torch.clamp(",
     "    unclipped = advantages * ratio\n    clipped = advantages * torch.clamp("),
])

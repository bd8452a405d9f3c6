"""Clamps the advantages into [1 - eps, 1 + eps] instead of the probability ratio."""
from harness.mutation import mutate

MUTATES = "ppo"
FEEDBACK = "clip the ratio r"
mutate(globals(), "ppo", "ppo", replace=[
    ("clipped = -advantages * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)",
     "clipped = -torch.clamp(advantages, 1.0 - clip_eps, 1.0 + clip_eps) * ratio"),
])

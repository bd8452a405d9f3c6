"""Adds the reward-model score at each row's first valid token instead of its last."""
from harness.mutation import mutate

MUTATES = "ppo"
FEEDBACK = "last valid token"
mutate(globals(), "ppo", "ppo", replace=[
    ("    last = torch.where(keep, positions, -1).max(dim=1).values\n"
     "    rows = torch.nonzero(last >= 0).squeeze(1)\n",
     "    last = torch.where(keep, positions, keep.shape[1]).min(dim=1).values\n"
     "    rows = torch.nonzero(last < keep.shape[1]).squeeze(1)\n"),
])

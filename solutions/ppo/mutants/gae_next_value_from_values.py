"""Bootstraps from the next row of the rollout, values[t+1], as CleanRL's GAE loop does, instead
of the documented next_values[t] (next_values only at the last step): across an episode boundary
that is the next episode's first state, and at a truncation not the final observation."""
from harness.mutation import mutate

MUTATES = "ppo"
FEEDBACK = "not values[t+1]"
mutate(globals(), "ppo", "ppo", replace=[
    ("    bootstrap = torch.where(is_terminated, zero, next_values.to(values.dtype))\n",
     "    following = torch.cat([values[1:], next_values[-1:].to(values.dtype)])\n"
     "    bootstrap = torch.where(is_terminated, zero, following)\n"),
])

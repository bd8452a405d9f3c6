"""Cuts the GAE recursion with the done flag of step t+1 instead of step t (the convention of
loops whose flags mark "this observation starts an episode"), so credit leaks across the
boundary and the step before an episode's end loses its own tail."""
from harness.mutation import mutate

MUTATES = "ppo"
FEEDBACK = "flags of step t itself"
mutate(globals(), "ppo", "ppo", replace=[
    ("        running = deltas[t] + gamma * lam * carry[t] * running\n",
     "        next_carry = carry[t + 1] if t + 1 < values.shape[0] else torch.ones_like(carry[t])\n"
     "        running = deltas[t] + gamma * lam * next_carry * running\n"),
])

"""Preempts the oldest running request instead of the newest: the request that has waited
longest is thrown back, and an already planned one can be pulled out of the plan."""
from harness.mutation import mutate

MUTATES = "scheduler"
FEEDBACK = "newest"
mutate(globals(), "serving", "scheduler", replace=[
    ("            victim = self.running[-1]\n", "            victim = self.running[0]\n"),
])

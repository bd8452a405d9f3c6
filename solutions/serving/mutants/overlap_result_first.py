"""Overlap mode takes step N's result before planning step N+1: nothing overlaps."""
from harness.mutation import mutate

MUTATES = "engine"
FEEDBACK = "in flight"
PLANNED = "        following = self.scheduler.schedule()  # planned while step N is (notionally)"
mutate(globals(), "serving", "engine", replace=[
    (PLANNED + " running\n        finished = self._finish_step(batch, launched)",
     "        finished = self._finish_step(batch, launched)\n"
     "        following = self.scheduler.schedule()"),
])

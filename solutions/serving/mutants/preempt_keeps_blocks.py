"""A preempted request keeps its KV blocks (and its cache reference): they leak."""
from harness.mutation import mutate

MUTATES = "scheduler"
FEEDBACK = "free a request's blocks"
mutate(globals(), "serving", "scheduler", replace=[
    ("        self._release(req)\n        self._preemptions += 1\n",
     "        self._preemptions += 1\n"),
])

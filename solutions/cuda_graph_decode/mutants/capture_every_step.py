"""Captures every bucket again at every step: right values, none of the savings."""
from harness.mutation import mutate

MUTATES = "runner"
FEEDBACK = "step() must only replay"
mutate(globals(), "cuda_graph_decode", "runner", replace=[
    ("        batch = self._check(tokens, positions, rows)\n",
     "        batch = self._check(tokens, positions, rows)\n"
     "        self._graphs = {}\n"
     "        self.capture()\n"),
])

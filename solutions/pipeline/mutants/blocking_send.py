"""Sends with a blocking dist.send: under 1F1B two neighbours each wait in a send for the
other's receive, and the step never ends."""
from harness.mutation import mutate

MUTATES = "pipeline"
FEEDBACK = "isend"
mutate(globals(), "pipeline", "pipeline", replace=[
    ("    pending.append(dist.isend(tensor.detach().contiguous(), dst=dst))",
     "    dist.send(tensor.detach().contiguous(), dst=dst)"),
])

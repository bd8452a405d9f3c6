"""Zeroes the gradients before every micro-batch's backward: only the last one survives."""
from harness.mutation import mutate

MUTATES = "pipeline"
FEEDBACK = "accumulate"
mutate(globals(), "pipeline", "pipeline", replace=[
    ("            x, y = inputs_in_flight.pop(mb), outputs_in_flight.pop(mb)\n",
     "            x, y = inputs_in_flight.pop(mb), outputs_in_flight.pop(mb)\n"
     "            optimizer.zero_grad()\n"),
])

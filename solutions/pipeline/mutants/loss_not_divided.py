"""Backpropagates each micro-batch's loss as it is: the gradient of the sum, m times the mean."""
from harness.mutation import mutate

MUTATES = "pipeline"
FEEDBACK = "num_microbatches"
mutate(globals(), "pipeline", "pipeline", replace=[
    ("                y = loss / m\n", "                y = loss\n"),
])

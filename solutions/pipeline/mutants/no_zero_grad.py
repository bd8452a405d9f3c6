"""Never zeroes the gradients: what .grad held before the step is added to this step's."""
from harness.mutation import mutate

MUTATES = "pipeline"
FEEDBACK = "zero_grad"
mutate(globals(), "pipeline", "pipeline", replace=[
    ("    optimizer.zero_grad()\n    # Per micro-batch", "    # Per micro-batch"),
])

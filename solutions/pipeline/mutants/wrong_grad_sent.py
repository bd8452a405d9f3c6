"""A middle stage passes on the gradient it received for its output instead of the gradient of
its input: right shape (the widths are equal), wrong values for every earlier stage."""
from harness.mutation import mutate

MUTATES = "pipeline"
FEEDBACK = ".grad of the input"
mutate(globals(), "pipeline", "pipeline", replace=[
    ("_send(x.grad, stage - 1, pending)", "_send(x.grad if last else grad, stage - 1, pending)"),
])

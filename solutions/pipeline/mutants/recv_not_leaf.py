"""The received activation is used as it is, without requires_grad: its .grad stays None, and
the stage sends zeros back, so no gradient reaches the stages before it."""
from harness.mutation import mutate

MUTATES = "pipeline"
FEEDBACK = "requires grad"
mutate(globals(), "pipeline", "pipeline", replace=[
    ("x = _recv(in_shape, dtype, stage - 1).requires_grad_()",
     "x = _recv(in_shape, dtype, stage - 1)"),
    ("_send(x.grad, stage - 1, pending)",
     "_send(x.grad if x.grad is not None else torch.zeros_like(x), stage - 1, pending)"),
])

"""Micro-batch losses are not divided by k: the accumulated gradient is k times the mean."""
from harness.mutation import mutate

MUTATES = "trainer"
FEEDBACK = "divide each micro-batch loss by k"
mutate(globals(), "ddp", "trainer", replace=[
    ("(loss / k).backward()", "loss.backward()"),
])

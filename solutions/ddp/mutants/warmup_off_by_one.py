"""Warm-up lr = max_lr * step / warmup_steps: step 0 trains with lr 0, max_lr comes a step late."""
from harness.mutation import mutate

MUTATES = "trainer"
FEEDBACK = "max_lr * (step + 1) / warmup_steps"
mutate(globals(), "ddp", "trainer", replace=[
    ("return max_lr * (step + 1) / warmup_steps", "return max_lr * step / warmup_steps"),
])

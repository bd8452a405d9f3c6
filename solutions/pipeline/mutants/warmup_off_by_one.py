"""1F1B warm-up of p - stage forwards instead of p - stage - 1: one micro-batch more in flight,
and the last stage runs a forward before its first backward."""
from harness.mutation import mutate

MUTATES = "pipeline"
FEEDBACK = "warm-up"
mutate(globals(), "pipeline", "pipeline", replace=[
    ("warmup = min(p - stage - 1, m)", "warmup = min(p - stage, m)"),
])

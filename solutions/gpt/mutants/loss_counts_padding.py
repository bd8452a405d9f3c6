"""The loss averages over every target, -1 included (cross_entropy without ignore_index): it
raises on -1 or, here, counts padding as class 0."""
from harness.mutation import mutate

MUTATES = "model"
FEEDBACK = "-1"
mutate(globals(), "gpt", "model", replace=[
    ("targets.reshape(-1),\n                                   ignore_index=-1)",
     "targets.reshape(-1).clamp(min=0))"),
])

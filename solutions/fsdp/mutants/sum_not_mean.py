"""The reduce-scatter's sum is kept as the gradient: every step is N times too large."""
from harness.mutation import mutate

MUTATES = "zero3"
FEEDBACK = "average"
mutate(globals(), "fsdp", "zero3", replace=[
    ("        return out.div_(self.world)", "        return out"),
])

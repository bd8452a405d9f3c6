"""Records the overflow (so the scale backs off) but steps the optimizer anyway: the inf/NaN
gradients land in the weights."""
from harness.mutation import mutate

MUTATES = "amp"
FEEDBACK = "skip optimizer.step()"
mutate(globals(), "mixed_precision", "amp", replace=[
    ("        if self._found_inf[id(optimizer)]:\n            return False\n", ""),
])

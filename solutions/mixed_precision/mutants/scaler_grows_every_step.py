"""Grows the scale after every clean step, ignoring growth_interval."""
from harness.mutation import mutate

MUTATES = "amp"
FEEDBACK = "before growth_interval clean steps"
mutate(globals(), "mixed_precision", "amp", replace=[
    ("if self._clean_steps == self.growth_interval:", "if self._clean_steps >= 1:"),
])

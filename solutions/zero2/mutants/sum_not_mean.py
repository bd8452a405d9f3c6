"""Gradients are summed over ranks, never divided by N: steps N times too large for SGD."""
from harness.mutation import mutate

MUTATES = "zero"
FEEDBACK = 'average the gradients (sum / N)'
mutate(globals(), "zero2", "zero", replace=[
    ("out.to(self._master_dtype) / self.world_size", "out.to(self._master_dtype)"),
])

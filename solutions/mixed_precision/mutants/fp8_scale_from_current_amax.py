"""Sets the fp8 scale from this call's amax instead of the history's maximum (no delayed
scaling: one small batch after a large one overflows)."""
from harness.mutation import mutate

MUTATES = "amp"
FEEDBACK = "current amax instead of the history"
mutate(globals(), "mixed_precision", "amp", replace=[
    ("    largest = history.max()\n", "    largest = amax.reshape(())\n"),
])

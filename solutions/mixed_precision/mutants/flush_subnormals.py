"""Flushes everything below the format's smallest normal to zero (no gradual underflow)."""
from harness.mutation import mutate

MUTATES = "amp"
FEEDBACK = "flushed to zero"
mutate(globals(), "mixed_precision", "amp", replace=[
    ("    out = torch.where(negative, -magnitude, magnitude)\n",
     "    magnitude = torch.where(magnitude < 2.0**emin, torch.zeros_like(magnitude), magnitude)\n"
     "    out = torch.where(negative, -magnitude, magnitude)\n"),
])

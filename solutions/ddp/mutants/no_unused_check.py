"""Unused parameters are silently zero-filled even without find_unused_parameters."""
from harness.mutation import mutate

MUTATES = "ddp"
FEEDBACK = "raise RuntimeError naming every trainable parameter"
mutate(globals(), "ddp", "ddp", replace=[
    ("if missing and not self.find_unused_parameters:", "if False:"),
])

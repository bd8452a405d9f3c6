"""no_sync() is ignored: every micro-batch's backward all-reduces (k times the bytes)."""
from harness.mutation import mutate

MUTATES = "ddp"
FEEDBACK = "no_sync"
mutate(globals(), "ddp", "ddp", replace=[
    ("        if not self._sync:\n            return  #",
     "        if False:\n            return  #"),
])

"""Backward never re-gathers a unit freed after forward: autograd reads the emptied storage."""
from harness.mutation import mutate

MUTATES = "zero3"
FEEDBACK = "re-gather"
mutate(globals(), "fsdp", "zero3", replace=[
    ("        self._gather()  # a no-op without resharding, or for the 2nd output of the unit\n",
     ""),
])

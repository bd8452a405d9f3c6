"""The wrapping policy is ignored: the whole model is one unit, gathered all at once."""
from harness.mutation import mutate

MUTATES = "zero3"
FEEDBACK = "one all-gather per unit"
mutate(globals(), "fsdp", "zero3", replace=[
    ("        self._units = [_Unit(u, group, reshard_after_forward) for u in units]",
     "        self._units = [_Unit(module, group, reshard_after_forward)]"),
    ("        self._prefixes = [_prefix_of(module, u) for u in units]",
     "        self._prefixes = [\"\"]"),
])

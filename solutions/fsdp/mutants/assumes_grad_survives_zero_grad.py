"""A unit assigns its shard's gradient in the first backward and adds to it in every later
one, as if .grad survived optimizer.zero_grad(): it does not (set_to_none), so step 2 crashes
on None. Step 1 is right: its memory, gradients and collectives keep their points."""
from harness.mutation import mutate

MUTATES = "zero3"
FEEDBACK = ("steps 2", "add_")
mutate(globals(), "fsdp", "zero3", replace=[
    ("        if self.shard.grad is None:\n            self.shard.grad = shard_grad\n",
     "        if not getattr(self, \"_had_grad\", False):\n            self._had_grad = True\n"
     "            self.shard.grad = shard_grad\n"),
])

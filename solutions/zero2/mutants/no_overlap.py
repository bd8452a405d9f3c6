"""No gradient hooks: every reduce-scatter waits for step() (correct, but no overlap)."""
from harness.mutation import mutate

MUTATES = "zero"
FEEDBACK = 'launch each bucket from post-accumulate-grad hooks'
mutate(globals(), "zero2", "zero", replace=[
    ("self._hooks = [slot.param.register_post_accumulate_grad_hook(self._hook_for(slot))\n"
     "                       for slot in self._slots]",
     "self._hooks = []"),
])

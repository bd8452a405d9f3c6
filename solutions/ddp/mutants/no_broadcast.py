"""No broadcast at construction: replicas seeded differently never agree."""
from harness.mutation import mutate

MUTATES = "ddp"
FEEDBACK = "broadcast"
mutate(globals(), "ddp", "ddp", replace=[
    ("        self._broadcast_state()\n", "        pass\n"),
])

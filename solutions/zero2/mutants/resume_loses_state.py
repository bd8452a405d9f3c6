"""load_state_dict restores the master shard but not the optimizer state (moments, step)."""
from harness.mutation import mutate

MUTATES = "zero"
FEEDBACK = 'after load_state_dict: restore every state'
mutate(globals(), "zero2", "zero", replace=[
    ('        self._inner.load_state_dict(state["inner"])\n', ""),
])

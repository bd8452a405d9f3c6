"""fork copies the parent's table but does not raise the blocks' reference counts."""
from harness.mutation import mutate

FEEDBACK = "fork must raise each block's reference count"
MUTATES = "allocator"
mutate(globals(), "paged_kv", "allocator", replace=[
    ("        for block in parent:\n            self._ref[block] += 1\n", ""),
])

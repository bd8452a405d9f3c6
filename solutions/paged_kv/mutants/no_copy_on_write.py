"""append_slot writes into a shared last block: a fork's new token overwrites the other's."""
from harness.mutation import mutate

FEEDBACK = "copy a shared last block (copy-on-write)"
MUTATES = "allocator"
mutate(globals(), "paged_kv", "allocator", replace=[
    ("elif self._ref[table[-1]] > 1:", "elif False:"),
])

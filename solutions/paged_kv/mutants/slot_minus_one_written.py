"""write_kv does not skip slot -1: padding rows land in the cache's very last slot."""
from harness.mutation import mutate

FEEDBACK = "skip entries of slot_mapping that are -1"
MUTATES = "cache"
mutate(globals(), "paged_kv", "cache", replace=[
    ("keep = slots >= 0", "keep = slots >= -1"),
])

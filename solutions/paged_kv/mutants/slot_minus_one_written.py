"""write_kv does not skip slot -1: padding rows land in the cache's very last slot."""
from harness.mutation import mutate

MUTATES = "cache"
mutate(globals(), "paged_kv", "cache", replace=[
    ("keep = slots >= 0", "keep = slots >= -1"),
])

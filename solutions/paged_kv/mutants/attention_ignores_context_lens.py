"""paged_attention masks padding blocks only: stale slots after the last token are attended."""
from harness.mutation import mutate

FEEDBACK = "attend only to positions < context_lens"
MUTATES = "cache"
mutate(globals(), "paged_kv", "cache", replace=[
    ("past_end = positions[None, :] >= lens[:, None]",
     "past_end = (tables < 0).repeat_interleave(block_size, dim=1)"),
])

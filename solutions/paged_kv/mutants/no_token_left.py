"""A prompt that is entirely cached reports every token cached: nothing left to compute."""
from harness.mutation import mutate

FEEDBACK = "leave at least one prompt token to compute"
MUTATES = "allocator"
mutate(globals(), "paged_kv", "allocator", replace=[
    ("for i in range((len(tokens) - 1) // bs):", "for i in range(len(tokens) // bs):"),
])

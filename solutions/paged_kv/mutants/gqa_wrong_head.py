"""Grouped-query attention maps query head h to KV head h % kv_heads, not h // group."""
from harness.mutation import mutate

MUTATES = "cache"
mutate(globals(), "paged_kv", "cache", replace=[
    ("keys = keys.repeat_interleave(group, dim=2)", "keys = keys.repeat(1, 1, group, 1)"),
    ("values = values.repeat_interleave(group, dim=2)", "values = values.repeat(1, 1, group, 1)"),
])

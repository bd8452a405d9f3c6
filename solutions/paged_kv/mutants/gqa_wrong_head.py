"""Grouped-query attention maps query head h to KV head h % kv_heads, not h // group."""
from harness.mutation import mutate

FEEDBACK = "query head h reads KV head h // (num_heads // kv_heads)"
MUTATES = "cache"
mutate(globals(), "paged_kv", "cache", replace=[
    ("queries = q.view(batch, kv_heads, group, head_dim)",
     "queries = q.view(batch, group, kv_heads, head_dim).transpose(1, 2)"),
])

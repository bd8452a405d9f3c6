"""Decode latency reads all the weights on every GPU: only the KV cache is split by TP."""
from harness.mutation import mutate

MUTATES = "planner"
FEEDBACK = "1/tp of the weights"
mutate(globals(), "nd_parallel", "planner", replace=[
    ("    memory = (WEIGHT_BYTES * params + kv_cache_bytes(model, batch, context)) / (\n"
     "        tp * cluster.hbm_bw)\n",
     "    memory = (WEIGHT_BYTES * params + kv_cache_bytes(model, batch, context) / tp) / (\n"
     "        cluster.hbm_bw)\n"),
])

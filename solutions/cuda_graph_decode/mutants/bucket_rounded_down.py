"""pick_bucket rounds down: the largest bucket <= batch_size, so batches get truncated."""
from harness.mutation import mutate

MUTATES = "runner"
FEEDBACK = "the smallest bucket >= batch_size"
mutate(globals(), "cuda_graph_decode", "runner", replace=[
    ("    fitting = [bucket for bucket in buckets if bucket >= batch_size]\n"
     "    return min(fitting) if fitting else None",
     "    fitting = [bucket for bucket in buckets if bucket <= batch_size]\n"
     "    return max(fitting) if fitting else None"),
])

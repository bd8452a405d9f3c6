"""Above the largest bucket, uses the largest graph anyway instead of running eagerly."""
from harness.mutation import mutate

MUTATES = "runner"
FEEDBACK = "above the largest bucket, run model.decode eagerly"
mutate(globals(), "cuda_graph_decode", "runner", replace=[
    ("        bucket = pick_bucket(batch, self.buckets)\n",
     "        bucket = pick_bucket(batch, self.buckets) or self.buckets[-1]\n"),
])

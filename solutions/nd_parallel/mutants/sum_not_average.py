"""The DP all-reduce sums the replicas' gradients and never divides by D."""
from harness.mutation import mutate

MUTATES = "train"
FEEDBACK = "average gradients"
mutate(globals(), "nd_parallel", "train", replace=[
    ("            grad /= dp_size\n", ""),
])

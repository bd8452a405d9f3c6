"""Gradients are averaged over the whole world, not the DP group: TP shards of different
parameters are summed together."""
from harness.mutation import mutate

MUTATES = "train"
FEEDBACK = "ran on ranks [0, 1, 2, 3]"
mutate(globals(), "nd_parallel", "train", replace=[
    ("            dist.all_reduce(grad, group=dp_group)\n",
     "            dist.all_reduce(grad)\n"),
])

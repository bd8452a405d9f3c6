"""ZeRO-1 without the all-gather: each zero rank updates its own chunk and keeps the others'
parameters stale."""
from harness.mutation import mutate

MUTATES = "train"
FEEDBACK = "all-gather"
mutate(globals(), "nd_parallel", "train", replace=[
    ("            dist.all_gather(gathered, new_chunk, group=zero_group)\n",
     "            gathered = [new_chunk if i == zero_rank else\n"
     "                        flat_param[i * chunk:(i + 1) * chunk] for i in range(zero_size)]\n"),
])

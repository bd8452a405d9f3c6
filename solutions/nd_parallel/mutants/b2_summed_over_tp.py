"""b2's gradient is also all-reduced over the TP group, though it is already whole there:
it comes out T times too large."""
from harness.mutation import mutate

MUTATES = "train"
FEEDBACK = ("TP group", "b2")
mutate(globals(), "nd_parallel", "train", replace=[
    ("            dist.all_reduce(grad, group=dp_group)\n",
     "            dist.all_reduce(grad, group=dp_group)\n"
     "            if name.endswith('b2'):\n"
     "                dist.all_reduce(grad, group=tp_group)\n"),
    ("        for param in named.values():\n            # Average",
     "        for name, param in named.items():\n            # Average"),
])

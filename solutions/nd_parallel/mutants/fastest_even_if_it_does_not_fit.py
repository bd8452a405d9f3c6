"""best_layout picks the fastest layout, whether or not it fits in memory."""
from harness.mutation import mutate

MUTATES = "planner"
FEEDBACK = ("must fit", "before it is fast")
mutate(globals(), "nd_parallel", "planner", replace=[
    ("                    if memory <= cluster.gpu_memory:\n",
     "                    if memory <= cluster.gpu_memory or True:\n"),
])

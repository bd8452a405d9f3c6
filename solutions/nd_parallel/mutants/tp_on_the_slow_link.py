"""TP's all-reduces costed on the link of the whole mesh's span: inter-node as soon as the
job has more than one node."""
from harness.mutation import mutate

MUTATES = "planner"
FEEDBACK = "intra-node link"
mutate(globals(), "nd_parallel", "planner", replace=[
    ("                                                            *_link(cluster, t))\n",
     "                                                            *_link(cluster, t * p * d))\n"),
])

"""Never replays: every step runs model.decode eagerly (right values, every launch paid)."""
from harness.mutation import mutate

MUTATES = "runner"
FEEDBACK = ("replayed 0 times", "one replay")
mutate(globals(), "cuda_graph_decode", "runner", replace=[
    ("        if bucket is None:  # larger than every graph: run eagerly\n",
     "        if True:\n"),
])

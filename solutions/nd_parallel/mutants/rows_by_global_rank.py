"""The replica's rows are chosen by the global rank instead of the rank in the DP group."""
from harness.mutation import mutate

MUTATES = "train"
FEEDBACK = "rows [k*B/D"
mutate(globals(), "nd_parallel", "train", replace=[
    ("    rows = _rows(x.shape[1], dp_size, dp_rank)\n",
     "    rows = _rows(x.shape[1], dp_size, dist.get_rank() % dp_size)\n"),
])

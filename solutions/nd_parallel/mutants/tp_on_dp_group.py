"""The TP layers get the DP group: their all-reduces add partial sums of different rows."""
from harness.mutation import mutate

MUTATES = "train"
FEEDBACK = "nothing ran on the TP group"
mutate(globals(), "nd_parallel", "train", replace=[
    ("    model, named = _model(shards, tp_group)\n    buffers",
     "    model, named = _model(shards, dp_group)\n    buffers"),
])

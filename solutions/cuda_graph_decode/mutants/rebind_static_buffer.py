"""Rebinds the static token buffer to a new tensor instead of copy_: the graph keeps reading
the tokens it saw at capture time (the pad entries)."""
from harness.mutation import mutate

MUTATES = "runner"
FEEDBACK = "copy_-ed into the captured buffers"
mutate(globals(), "cuda_graph_decode", "runner", replace=[
    ("        self._tokens[:batch].copy_(tokens)\n",
     "        self._tokens = torch.cat([tokens.to(self._tokens), self._tokens[batch:]])\n"),
])

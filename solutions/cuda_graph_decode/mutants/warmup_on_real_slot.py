"""Warms up on zero-filled buffers (row 0, position 0): capture overwrites row 0's first token."""
from harness.mutation import mutate

MUTATES = "runner"
FEEDBACK = ("capture() changed real slots", "pad entries")
mutate(globals(), "cuda_graph_decode", "runner", replace=[
    ("        self._pad_from(0, self.buckets[-1])\n", ""),
    ("        self._positions = torch.full((largest,), model.pad_position, dtype=torch.long,\n"
     "                                     device=device)\n",
     "        self._positions = torch.zeros(largest, dtype=torch.long, device=device)\n"),
])

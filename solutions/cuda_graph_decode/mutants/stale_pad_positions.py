"""Ignores the positions of padded slots: they keep whatever the previous step left there, so
padded entries write into real slots of row 0."""
from harness.mutation import mutate

MUTATES = "runner"
FEEDBACK = "pad slots use position model.pad_position"
mutate(globals(), "cuda_graph_decode", "runner", replace=[
    ("        self._positions[start:stop].fill_(self.model.pad_position)\n", ""),
])

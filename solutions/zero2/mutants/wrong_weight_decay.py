"""Each group's shard piece gets the next group's weight decay."""
from harness.mutation import mutate

MUTATES = "zero"
FEEDBACK = "its own group's weight_decay"
mutate(globals(), "zero2", "zero", replace=[
    ('hyper = {k: v for k, v in group.items() if k != "params"}',
     'hyper = {k: v for k, v in group.items() if k != "params"}\n'
     '            neighbour = self._groups[len(self._segments) % len(self._groups)]\n'
     '            if "weight_decay" in neighbour:\n'
     '                hyper["weight_decay"] = neighbour["weight_decay"]'),
])

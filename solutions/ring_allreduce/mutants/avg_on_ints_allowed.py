"""Accepts op='avg' on integer tensors instead of raising TypeError before communicating."""
from harness.mutation import mutate

MUTATES = "ring"
FEEDBACK = ("must raise TypeError", "integer")
mutate(globals(), "ring_allreduce", "ring", replace=[
    ('    if op == "avg" and not dtype.is_floating_point:\n        raise TypeError(',
     '    if False:\n        raise TypeError('),
])

"""Runs the backward after leaving the counter: the backward's operators go uncounted."""
from harness.mutation import mutate

MUTATES = "flops"
FEEDBACK = "backward counted nothing"
mutate(globals(), "framework", "flops", replace=[
    ("""    with FlopCounter() as backward:
        out.backward(torch.ones_like(out))""", """    backward = FlopCounter()
    out.backward(torch.ones_like(out))"""),
])

"""The silu derivative with the wrong sign: s·(1 − g·(1 − s))."""
from harness.mutation import mutate

MUTATES = "autograd_memory"
FEEDBACK = "1 + gate"
mutate(globals(), "framework", "autograd_memory", replace=[
    ("grad * up * s * (1 + gate * (1 - s))", "grad * up * s * (1 - gate * (1 - s))"),
])

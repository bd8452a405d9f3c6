"""The all-reduced SUM is never divided by the world size: gradients N times too large."""
from harness.mutation import mutate

MUTATES = "ddp"
FEEDBACK = "divide the all-reduced sum"
mutate(globals(), "ddp", "ddp", replace=[
    ("        return bucket.div_(size)\n", "        return bucket\n"),
])

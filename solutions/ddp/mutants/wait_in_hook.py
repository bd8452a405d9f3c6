"""Waits on each all-reduce as soon as it is launched: correct numbers, backward stalls on
every bucket (no overlap)."""
from harness.mutation import mutate

MUTATES = "ddp"
FEEDBACK = "async_op=True and wait only in the end-of-backward callback"
mutate(globals(), "ddp", "ddp", replace=[
    ("    handle = dist.all_reduce(bucket, op=dist.ReduceOp.SUM, group=group, async_op=True)\n",
     "    handle = dist.all_reduce(bucket, op=dist.ReduceOp.SUM, group=group, async_op=True)\n"
     "    handle.wait()\n"),
])

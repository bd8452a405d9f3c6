"""The backward all-to-all reuses the forward's splits instead of swapping them: where every
rank sends as many rows as it receives it runs, and sends each gradient to the wrong rows."""
from harness.mutation import mutate

MUTATES = "moe"
FEEDBACK = "swap the splits"
mutate(globals(), "moe", "moe", replace=[
    ("        back = _all_to_all_rows(grad.contiguous(), ctx.recv_splits, ctx.send_splits, "
     "ctx.group)",
     "        back = grad.new_empty((sum(ctx.send_splits), *grad.shape[1:]))\n"
     "        dist.all_to_all_single(back, grad.contiguous(), "
     "output_split_sizes=ctx.recv_splits,\n"
     "                               input_split_sizes=ctx.send_splits, group=ctx.group)"),
])

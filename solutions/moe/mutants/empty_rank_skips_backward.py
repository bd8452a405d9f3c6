"""A rank whose experts received no rows skips the backward of the dispatch all-to-all (its
gradient has no rows): the other ranks wait in that collective until the harness's stall watch
ends the launch, and `launch_cases` runs the rest again without that case. The layer cases with
such a rank fail; nothing else may (README §9, "Ranks that skip a collective")."""
from harness.mutation import mutate

MUTATES = "moe"
FEEDBACK = ("every all-to-all",)
mutate(globals(), "moe", "moe", replace=[
    ("        back = _all_to_all_rows(grad.contiguous(), ctx.recv_splits, ctx.send_splits, "
     "ctx.group)\n",
     "        if grad.shape[0] == 0:\n"
     "            return grad.new_zeros((sum(ctx.send_splits), *grad.shape[1:])), None, None, "
     "None\n"
     "        back = _all_to_all_rows(grad.contiguous(), ctx.recv_splits, ctx.send_splits, "
     "ctx.group)\n"),
])

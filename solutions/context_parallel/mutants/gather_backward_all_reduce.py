"""The gather's backward all-reduces the gradient and slices it (TP's f habit): right values,
N times the bytes of the reduce-scatter it should be."""
from harness.mutation import mutate

MUTATES = "cp"
FEEDBACK = "reduce-scatter"
mutate(globals(), "context_parallel", "cp", replace=[
    ("        return _reduce_scatter_seq(grad, ctx.group), None",
     "        total = grad.contiguous().clone()\n"
     "        dist.all_reduce(total, group=ctx.group)\n"
     "        size, rank = _group_size_rank(ctx.group)\n"
     "        return total.chunk(size, dim=1)[rank].contiguous(), None"),
])

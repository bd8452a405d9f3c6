"""DDP's all-reduce of the whole gradient, then each rank keeps its slice: right values,
twice the gradient traffic, and an all-reduce of P elements."""
from harness.mutation import mutate

MUTATES = "zero"
FEEDBACK = 'gradients go through a reduce-scatter'
mutate(globals(), "zero2", "zero")


def reduce_scatter_async(self, out, inp):
    if self.is_local:
        out.copy_(inp[0])
        return None
    total = inp.clone()
    dist.all_reduce(total, group=self.group)
    out.copy_(total[self.rank])
    return None


_Comm.reduce_scatter_async = reduce_scatter_async

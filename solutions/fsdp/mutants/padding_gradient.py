"""The flat gradient is built in a buffer whose padding is never cleared (torch.empty's leftovers;
ones here, to be deterministic): the padding of the shard's .grad is not zero."""
from harness.mutation import mutate

MUTATES = "zero3"
FEEDBACK = "padding gradient not zero"
mutate(globals(), "fsdp", "zero3", replace=[
    ("        shard_grad = self._reduce_scatter_mean(full.grad)",
     """        flat = torch.ones_like(full.grad)
        real = sum(numel for *_, numel in self.layout)
        flat[:real] = full.grad[:real]
        shard_grad = self._reduce_scatter_mean(flat)"""),
])

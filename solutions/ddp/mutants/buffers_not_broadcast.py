"""The constructor broadcasts rank 0's parameters but not its buffers: each replica keeps the
buffer it was built with, so the forward differs by rank while every gradient is averaged."""
from harness.mutation import mutate

MUTATES = "ddp"
FEEDBACK = "buffer"
mutate(globals(), "ddp", "ddp", replace=[
    ("            for tensor in list(self.module.parameters()) + list(self.module.buffers()):",
     "            for tensor in list(self.module.parameters()):"),
])

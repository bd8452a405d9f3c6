"""Adds the bias of addmm to its FLOPs (one add per output element)."""
from harness.mutation import mutate

MUTATES = "flops"
FEEDBACK = "bias is free"
mutate(globals(), "framework", "flops", replace=[
    ("""        return _matmul_flops(args[1].shape, args[2].shape)""",
     """        return _matmul_flops(args[1].shape, args[2].shape) + out.numel()"""),
])

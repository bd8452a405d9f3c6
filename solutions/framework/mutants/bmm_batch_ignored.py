"""Counts bmm as one matrix product: the batch dimension is dropped."""
from harness.mutation import mutate

MUTATES = "flops"
FEEDBACK = "count every batch"
mutate(globals(), "framework", "flops", replace=[
    ("""    if name == "aten.bmm":
        return _matmul_flops(args[0].shape, args[1].shape)""",
     """    if name == "aten.bmm":
        return _matmul_flops(args[0].shape[1:], args[1].shape[1:])"""),
])

"""The row-parallel layer adds its bias to each partial sum, before the all-reduce: p biases."""
from harness.mutation import mutate

FEEDBACK = "add the bias once"
MUTATES = "layers"
mutate(globals(), "tensor_parallel", "layers", replace=[
    ("""        partial = F.linear(x, self.weight)
        y = reduce_from_parallel_region(partial, self.group)
        # After the sum: adding the bias to each partial sum would count it p times.
        return y + self.bias if self.bias is not None else y""",
     """        partial = F.linear(x, self.weight, self.bias)
        return reduce_from_parallel_region(partial, self.group)"""),
])

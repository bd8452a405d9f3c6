"""Right values for the wrong reason: the MLP gathers the intermediate activation after the
column layer and scatters it again before the row layer (an all-gather per pass on top of the
all-reduces)."""
from harness.mutation import mutate

FEEDBACK = "one all-reduce of batch*seq*hidden"
MUTATES = "layers"
mutate(globals(), "tensor_parallel", "layers", replace=[
    ("        return self.down(F.gelu(self.up(x)))",
     "        h = gather_from_parallel_region(self.up(x), self.up.group)\n"
     "        return self.down(scatter_to_parallel_region(F.gelu(h), self.up.group))"),
])

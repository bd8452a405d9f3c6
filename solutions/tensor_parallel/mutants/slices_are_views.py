"""from_dense keeps views of the dense weights instead of copies: each rank holds the whole
dense storage alive."""
from harness.mutation import mutate

FEEDBACK = "Copy the slice (.clone())"
MUTATES = "layers"
mutate(globals(), "tensor_parallel", "layers", replace=[
    ("        layer.weight = nn.Parameter(linear.weight.detach()[rows].clone())",
     "        layer.weight = nn.Parameter(linear.weight.detach()[rows])"),
    ("        layer.weight = nn.Parameter(linear.weight.detach()[:, cols].clone())",
     "        layer.weight = nn.Parameter(linear.weight.detach()[:, cols])"),
])

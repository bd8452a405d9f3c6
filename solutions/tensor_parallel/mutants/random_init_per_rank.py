"""from_dense keeps the layers' own random initialisation instead of slicing the dense weights
(only the dtype is taken from the dense layer)."""
from harness.mutation import mutate

FEEDBACK = "from_dense keeps rows slice r of the dense weight"
MUTATES = "layers"
mutate(globals(), "tensor_parallel", "layers", replace=[
    ("        layer.weight = nn.Parameter(linear.weight.detach()[rows].clone())\n"
     "        if linear.bias is not None:\n"
     "            layer.bias = nn.Parameter(linear.bias.detach()[rows].clone())\n",
     "        layer.to(linear.weight.dtype)\n"),
    ("        layer.weight = nn.Parameter(linear.weight.detach()[:, cols].clone())\n"
     "        if linear.bias is not None:\n"
     "            layer.bias = nn.Parameter(linear.bias.detach().clone())\n",
     "        layer.to(linear.weight.dtype)\n"),
])

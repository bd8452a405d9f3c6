"""from_dense keeps slices of the dense expert weights as views: the module holds the storage of
all E experts, not E/N."""
from harness.mutation import mutate

MUTATES = "moe"
FEEDBACK = "never keep views of the dense weights"
mutate(globals(), "moe", "moe", replace=[
    ("        layer.w_gate = nn.Parameter(w_gate.detach()[mine].clone())\n"
     "        layer.w_up = nn.Parameter(w_up.detach()[mine].clone())\n"
     "        layer.w_down = nn.Parameter(w_down.detach()[mine].clone())\n",
     "        layer.w_gate = nn.Parameter(w_gate.detach()[mine])\n"
     "        layer.w_up = nn.Parameter(w_up.detach()[mine])\n"
     "        layer.w_down = nn.Parameter(w_down.detach()[mine])\n"),
])

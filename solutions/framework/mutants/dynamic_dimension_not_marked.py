"""compile_model compiles with static shapes: one graph per sequence length."""
from harness.mutation import mutate

MUTATES = "compile_friendly"
FEEDBACK = "one recompile per length"
mutate(globals(), "framework", "compile_friendly", replace=[
    ("compiled = torch.compile(model, backend=backend, fullgraph=True)",
     "compiled = torch.compile(model, backend=backend, fullgraph=True, dynamic=False)"),
    ("        torch._dynamo.mark_dynamic(x, 1)\n", ""),
])

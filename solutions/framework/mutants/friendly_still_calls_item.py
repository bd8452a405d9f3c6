"""FriendlyMLP still reads the maximum with .item() and branches on it in Python."""
from harness.mutation import mutate

MUTATES = "compile_friendly"
FEEDBACK = "graph break"
mutate(globals(), "framework", "compile_friendly", replace=[
    ("""        largest = h.abs().amax()
        h = h / torch.clamp(largest, min=1.0)""",
     """        largest = h.abs().amax().item()
        if largest > 1.0:
            h = h / largest"""),
])

"""FriendlyMLP keeps the Python loop over positions: the graph bakes in the sequence length."""
from harness.mutation import mutate

MUTATES = "compile_friendly"
FEEDBACK = "depends on the sequence length"
mutate(globals(), "framework", "compile_friendly", replace=[
    ("""        positions = torch.arange(1, x.shape[1] + 1, dtype=h.dtype, device=h.device)
        mean = torch.cumsum(h, dim=1) / positions[:, None]""",
     """        running, total = [], torch.zeros_like(h[:, 0])
        for t in range(x.shape[1]):
            total = total + h[:, t]
            running.append(total / (t + 1))
        mean = torch.stack(running, dim=1)"""),
])

"""Residual output projections initialised like every other matrix (std 0.02, not scaled)."""
from harness.mutation import mutate

MUTATES = "model"
FEEDBACK = "2 * n_layers"
mutate(globals(), "gpt", "model", replace=[
    ("        residual_std = std / math.sqrt(2 * self.config.n_layers)",
     "        residual_std = std"),
])

"""Treats E4M3 like an IEEE format: overflow goes to inf, but the fn variant has no infinities
and torch's cast saturates at ±448."""
from harness.mutation import mutate

MUTATES = "amp"
FEEDBACK = "saturate to ±448"
mutate(globals(), "mixed_precision", "amp", replace=[
    ('too_big = torch.tensor(max_finite if saturates else float("inf"), dtype=torch.float32)',
     'too_big = torch.tensor(float("inf"), dtype=torch.float32)'),
])

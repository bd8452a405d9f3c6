"""load_checkpoint restores model and optimizer but not the RNG: other dropout masks."""
from harness.mutation import mutate

MUTATES = "trainer"
FEEDBACK = "RNG state"
mutate(globals(), "ddp", "trainer", replace=[
    ("    torch.set_rng_state(checkpoint[\"rng\"][rank])\n", ""),
])

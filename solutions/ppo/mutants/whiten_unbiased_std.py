"""Whitens with the unbiased std, as CleanRL's advantage normalisation does
((x - x.mean()) / (x.std() + 1e-8), torch.std dividing by n - 1): every batch is scaled a little
off, and one valid element divides by n - 1 = 0 and gives nan."""
from harness.mutation import mutate

MUTATES = "ppo"
FEEDBACK = ("count - 1", "unbiased")
mutate(globals(), "ppo", "ppo", replace=[
    ("    var = masked_mean((x - mean) ** 2, mask)\n"
     "    whitened = (x - mean) * torch.rsqrt(var + eps)\n",
     "    valid = x if mask is None else x[mask.to(torch.bool)]\n"
     "    whitened = (x - mean) / (valid.std() + eps)\n"),
])

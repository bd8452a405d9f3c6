"""masked_mean divides the masked sum by the full length instead of the number of valid
positions: padding dilutes every loss and statistic."""
from harness.mutation import mutate

MUTATES = "ppo"
FEEDBACK = "not the full length"
mutate(globals(), "ppo", "ppo", replace=[
    ("        return selected.sum() / keep.sum().clamp(min=1)\n"
     "    return selected.sum(dim) / keep.sum(dim).clamp(min=1)\n",
     "        return selected.sum() / keep.numel()\n"
     "    return selected.sum(dim) / keep.shape[dim]\n"),
])

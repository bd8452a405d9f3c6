"""Value clipping with the min of the clipped and unclipped errors instead of the max: the
critic is trusted most exactly where it moved the most."""
from harness.mutation import mutate

MUTATES = "ppo"
FEEDBACK = "max of the clipped and unclipped"
mutate(globals(), "ppo", "ppo", replace=[
    ("error = torch.maximum(error, (clipped_values - returns) ** 2)",
     "error = torch.minimum(error, (clipped_values - returns) ** 2)"),
])

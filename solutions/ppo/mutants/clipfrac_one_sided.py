"""Counts only ratios above 1 + eps in clipfrac: a policy that collapses probabilities
(r < 1 - eps) looks unclipped."""
from harness.mutation import mutate

MUTATES = "ppo"
FEEDBACK = "count both sides of the band"
mutate(globals(), "ppo", "ppo", replace=[
    ('"clipfrac": masked_mean(((ratio - 1.0).abs() > clip_eps).to(ratio.dtype), mask),',
     '"clipfrac": masked_mean(((ratio - 1.0) > clip_eps).to(ratio.dtype), mask),'),
])

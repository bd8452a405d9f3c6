"""Uses log pi_ref - log pi as the log-ratio: k1 changes sign (the penalty becomes a bonus for
drifting away from the reference) and k3 estimates a different divergence."""
from harness.mutation import mutate

MUTATES = "ppo"
FEEDBACK = "logp - ref_logp"
mutate(globals(), "ppo", "ppo", replace=[
    ("    log_ratio = logp - ref_logp  # log pi(x) - log pi_ref(x)\n",
     "    log_ratio = ref_logp - logp\n"),
])

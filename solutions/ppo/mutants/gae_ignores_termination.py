"""GAE that never looks at terminated: it bootstraps through terminal states and lets the
recursion run across episode boundaries on termination (truncation still stops it)."""
from harness.mutation import mutate

MUTATES = "ppo"
FEEDBACK = "terminated step bootstraps 0"
mutate(globals(), "ppo", "ppo", replace=[
    ("    is_terminated = terminated.to(torch.bool)\n",
     "    is_terminated = torch.zeros_like(terminated, dtype=torch.bool)\n"),
])

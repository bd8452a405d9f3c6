"""Co-located: generates from a deep copy of the actor, two copies of the policy per rank."""
from harness.mutation import mutate

MUTATES = "placement"
FEEDBACK = "copy of the policy"
mutate(globals(), "rlhf_system", "placement", replace=[
    ("        exp = make_experience(actor, reference, critic if cfg.advantage == \"gae\" else None,",
     "        exp = make_experience(copy.deepcopy(actor), reference,\n"
     "                              critic if cfg.advantage == \"gae\" else None,"),
    ("from typing import Any\n", "import copy\nfrom typing import Any\n"),
])

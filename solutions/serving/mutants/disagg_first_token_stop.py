"""The decode rank decodes every request at least once, even one whose first token (from
the prefill rank) is already its stop_token."""
from harness.mutation import mutate

MUTATES = "engine"
FEEDBACK = ("first token", "stop_token")
mutate(globals(), "serving", "engine", replace=[
    ("        if len(req.output) < req.max_tokens and req.output[-1] != req.stop_token:\n"
     "            live.append(req)\n",
     "        if len(req.output) < req.max_tokens:\n"
     "            live.append(req)\n"),
])

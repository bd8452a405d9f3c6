"""An admission adds len(prompt) to lookup_tokens instead of len(tokens): a request
re-admitted after preemption (its output kept) undercounts the tokens it looked up."""
from harness.mutation import mutate

MUTATES = "scheduler"
FEEDBACK = ("lookup_tokens", "len(tokens)")
mutate(globals(), "serving", "scheduler", replace=[
    ("self.lookup_tokens += len(tokens)", "self.lookup_tokens += len(req.prompt)"),
])

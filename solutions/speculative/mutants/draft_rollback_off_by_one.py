"""Rolls the draft's cache back one position too few: after a rejection it keeps the rejected
draft token, so the draft proposes from a wrong prefix. The output is still right (the target
verifies), but fewer drafts are accepted than the contract's rounds give."""
from harness.mutation import mutate

MUTATES = "speculative"
FEEDBACK = "draft's cache"
mutate(globals(), "speculative", "speculative", replace=[
    ("        draft.rollback(draft_kept)",
     "        draft.rollback(min(draft.cache_len, draft_kept + 1))"),
])

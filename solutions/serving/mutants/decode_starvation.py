"""Plans prefills and admissions before the decodes: with the budget full of prompt tokens,
running requests get no decode and stall mid-answer."""
from harness.mutation import mutate

MUTATES = "scheduler"
FEEDBACK = "decode first"
mutate(globals(), "serving", "scheduler", replace=[
    ("""        budget = self.max_num_tokens
        preemptions_before = self._preemptions
        batch: list[ScheduledEntry] = []
        planned: set[int] = set()""", """        budget = self.max_num_tokens
        preemptions_before = self._preemptions
        batch: list[ScheduledEntry] = []
        planned: set[int] = set()
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            entry = self._admit(self.waiting[0], budget)
            if entry is None:
                break
            batch.append(entry)
            planned.add(entry.request.request_id)
            budget -= entry.num_tokens"""),
    ("""            if req.num_computed == len(req.prompt) + len(req.output) \\
                    and len(req.output) + 1 >= req.max_tokens:""",
     """            if req.request_id in planned or budget == 0:
                continue
            if req.num_computed == len(req.prompt) + len(req.output) \\
                    and len(req.output) + 1 >= req.max_tokens:"""),
])

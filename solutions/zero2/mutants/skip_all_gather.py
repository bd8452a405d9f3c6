"""No all-gather: each rank copies only its own updated shard into its parameters."""
from harness.mutation import mutate

MUTATES = "zero"
FEEDBACK = "all-gather every shard"
mutate(globals(), "zero2", "zero")


def _gather_params(self):
    start, end = self.shard_bounds
    with torch.no_grad():
        for slot in self._slots:
            lo, hi = max(slot.start, start), min(slot.start + slot.numel, end)
            if lo < hi:
                flat = slot.param.view(-1)
                flat[lo - slot.start:hi - slot.start].copy_(self._master[lo - start:hi - start])


Zero2Optimizer._gather_params = _gather_params

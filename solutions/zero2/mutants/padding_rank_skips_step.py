"""A rank that owns no real element (its shard is all padding: rank * S >= P) returns from
step() early, as if it had nothing to do: the other ranks then wait for it in the all-gather.
Only a model smaller than the world size has such a rank, so only that case hangs."""
from harness.mutation import mutate

MUTATES = "zero"
FEEDBACK = ("one element hung", "all_gather")
mutate(globals(), "zero2", "zero", replace=[(
    '''        grad_shard = self._reduce_gradients()
        if grad_shard is None:
            return loss  # no gradient on any parameter: nothing to update, nothing to send
''',
    '''        grad_shard = self._reduce_gradients()
        if grad_shard is None or self.shard_bounds[0] >= self.numel:
            return loss  # nothing of this rank's to update
''')])

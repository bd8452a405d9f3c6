"""Right values for the wrong reason: the cross-entropy all-gathers the full logits and calls
F.cross_entropy, moving V/p values per token per rank instead of three."""
from harness.mutation import mutate

FEEDBACK = "never gather the logits"
MUTATES = "layers"
mutate(globals(), "tensor_parallel", "layers")


def vocab_parallel_cross_entropy(logits_shard, target, group=None):
    full = gather_from_parallel_region(logits_shard, group)
    loss = F.cross_entropy(full.flatten(0, -2), target.flatten(), reduction="none")
    return loss.reshape(target.shape)

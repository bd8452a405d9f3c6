"""The padding past P in each bucket is 1 instead of 0: the gradient norm counts it."""
from harness.mutation import mutate

MUTATES = "zero"
FEEDBACK = "keep the padding past P zero"
mutate(globals(), "zero2", "zero")

_solution_bucket_buffer = Zero2Optimizer._bucket_buffer


def _bucket_buffer(self, k):
    fresh = k not in self._buffers
    buffer = _solution_bucket_buffer(self, k)
    if fresh:
        for row in range(self.world_size):
            first = row * self.shard_numel + self._edges[k]
            for col in range(buffer.shape[1]):
                if first + col >= self.numel:
                    buffer[row, col] = 1.0
    return buffer


Zero2Optimizer._bucket_buffer = _bucket_buffer

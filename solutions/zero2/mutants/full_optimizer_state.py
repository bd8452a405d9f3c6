"""Every rank keeps master weights and optimizer state for the whole flat space (ZeRO-0
memory); gradients are still reduce-scattered and only the own shard is all-gathered, so the
values and the traffic are right and only the memory is wrong."""
from harness.mutation import mutate

MUTATES = "zero"
FEEDBACK = 'a shard holds at most'
mutate(globals(), "zero2", "zero", replace=[
    ("start, size = self.shard_bounds[0], self.shard_numel",
     "start, size = 0, self.world_size * self.shard_numel"),
    ("self._grad_shard = torch.zeros(self.shard_numel,",
     "self._grad_shard = torch.zeros(self.world_size * self.shard_numel,"),
    ("lo, hi = self._edges[k], self._edges[k + 1]",
     "lo, hi = (self.shard_bounds[0] + self._edges[k], self.shard_bounds[0] + self._edges[k + 1])"),
    ("self._comm.all_gather(full, self._master.to(self._dtype))",
     "self._comm.all_gather(full, self._master[slice(*self.shard_bounds)].to(self._dtype))"),
])

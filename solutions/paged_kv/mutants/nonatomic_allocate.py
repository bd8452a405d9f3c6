"""allocate takes blocks one by one and raises OutOfBlocks midway: the blocks it took leak."""
from harness.mutation import mutate

FEEDBACK = "a failed allocate must change nothing"
MUTATES = "allocator"
mutate(globals(), "paged_kv", "allocator", replace=[
    ('''        self._ensure_free(needed, f"allocate({seq_id!r}, {num_tokens})")
        table = [self._take_block() for _ in range(needed)]''',
     '''        table = []
        for _ in range(needed):
            self._ensure_free(1, f"allocate({seq_id!r}, {num_tokens})")
            table.append(self._take_block())'''),
])

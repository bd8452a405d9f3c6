"""Every bucket is launched as soon as it is full, not in index order: with an unused
parameter in bucket 0 the later buckets go first (README §4: bucket i waits for 0..i-1), and
two ranks whose buckets fill in different orders would all-reduce unrelated buffers."""
from harness.mutation import mutate

MUTATES = "ddp"
FEEDBACK = ("in index order", "0..i-1")
mutate(globals(), "ddp", "ddp", replace=[
    ("        while (self._next_launch < len(self._buckets)\n"
     "               and len(self._buckets[self._next_launch].ready)\n"
     "               == len(self._buckets[self._next_launch].params)):\n"
     "            self._launch(self._next_launch)\n",
     "        if len(bucket.ready) == len(bucket.params) and bucket.finish is None:\n"
     "            bucket.finish = self._hook(bucket.flat, self.group)\n"),
    ("        while self._next_launch < len(self._buckets):\n"
     "            self._launch(self._next_launch)\n"
     "        for bucket in self._buckets:\n"
     "            assert bucket.finish is not None\n",
     "        for bucket in self._buckets:\n"
     "            if bucket.finish is None:\n"
     "                bucket.finish = self._hook(bucket.flat, self.group)\n"
     "        for bucket in self._buckets:\n"
     "            assert bucket.finish is not None\n"),
])

"""Admission evicts to make room before taking a reference on its own cache hit, so the
eviction may remove the very prefix it matched (README §10's pitfall)."""
from harness.mutation import mutate

MUTATES = "scheduler"
FEEDBACK = ("inc_ref", "before")
mutate(globals(), "serving", "scheduler", replace=[
    ("            self.cache.inc_ref(node)  # lock it before evicting, or we could evict our "
     "own hit\n            self.manager.incref(cached)\n"
     "        take = min(len(tokens) - len(cached), budget)\n"
     "        if not self._reserve(take):\n"
     "            if self.cache is not None:\n"
     "                self.manager.free(cached)\n"
     "                self.cache.dec_ref(node)\n"
     "            return None\n",
     "        take = min(len(tokens) - len(cached), budget)\n"
     "        if not self._reserve(take):\n"
     "            return None\n"
     "        if self.cache is not None:\n"
     "            self.cache.inc_ref(node)\n"
     "            self.manager.incref(cached)\n"),
])

"""Raises OutOfMemoryError as soon as the device is full, without emptying the cache first."""
from harness.mutation import mutate

FEEDBACK = "retry"
MUTATES = "caching_allocator"
mutate(globals(), "allocator", "caching_allocator", replace=[
    ("            self.empty_cache()\n            try:\n"
     "                address = self.device.malloc(segment_size)\n",
     "            try:\n                raise DeviceOutOfMemory\n"),
])

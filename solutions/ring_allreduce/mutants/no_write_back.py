"""Works on a contiguous copy of a non-contiguous input and never copies the result back."""
from harness.mutation import mutate

MUTATES = "ring"
FEEDBACK = "copy the result back through the view"
mutate(globals(), "ring_allreduce", "ring")


def _write_back(tensor, flat):
    return None

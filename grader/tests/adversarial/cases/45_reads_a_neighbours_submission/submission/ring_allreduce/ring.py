import glob
import os
import sys

from . import _honest
from ._honest import *  # noqa: F403

_MINE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this submission
# The grading checkout the rank imports from (its stubs and provided modules are readable by
# design): the sys.path entries that hold an assignments/ package. Not a neighbour.
_CHECKOUTS = [os.path.abspath(p) for p in sys.path
              if p and os.path.isdir(os.path.join(p, "assignments"))]


def _neighbours():
    """Files of other submissions this rank can read (the folders beside its own, or under any
    grading folder of the machine's /tmp)."""
    places = [os.path.dirname(os.path.dirname(_MINE)), "/tmp", "/var/tmp"]
    found = []
    for place in places:
        pattern = os.path.join(place, "**", "ring_allreduce", "*.py")
        for path in glob.glob(pattern, recursive=True):
            where = os.path.abspath(path)
            if any(where.startswith(root + os.sep) for root in [_MINE, *_CHECKOUTS]):
                continue
            try:
                with open(path, "rb") as f:
                    f.read(1)
            except OSError:
                continue
            found.append(path)
    return found


def ring_all_reduce(tensor, op="sum", group=None):
    seen = _neighbours()
    if seen:
        raise ValueError(f"read another submission: {seen[:3]}")
    return _honest.ring_all_reduce(tensor, op=op, group=group)

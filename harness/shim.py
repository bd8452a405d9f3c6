"""Interpreter shim that starts the forkserver: `python -I shim.py [flags] -c CODE [args]`.

It runs CODE as `python -c` would, with the course root first on sys.path. The forkserver's
preload (torch, the harness) then works from any working directory and under `python -I`, where
Python 3.11's forkserver would otherwise fail to import the harness, silently, and every rank
would pay for importing torch itself.
"""

import ctypes
import os
import sys

try:  # orphans of ranks (double fork, setsid) are reparented to us: the launcher finds them
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
except (OSError, AttributeError):
    pass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
_args = sys.argv[1:]
if "-c" not in _args:
    raise SystemExit("harness/shim.py: expected `-c CODE`")
_code = _args[_args.index("-c") + 1]
sys.argv = ["-c", *_args[_args.index("-c") + 2:]]
# S102: CODE is multiprocessing's forkserver bootstrap, run as `python -c` would run it.
exec(compile(_code, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})  # noqa: S102

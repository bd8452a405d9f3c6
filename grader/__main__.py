"""`python -m grader ...`: see `grader.cli` for the commands."""

import signal
import sys

from grader.cli import main


def _terminate(signum, frame):
    # SystemExit unwinds through the runner, which kills the pytest sessions it started.
    raise SystemExit(128 + signum)


if __name__ == "__main__":  # guarded: spawned benchmark workers re-import this module
    signal.signal(signal.SIGTERM, _terminate)
    sys.exit(main())

"""`python -m grader ...`: see `grader.cli` for the commands."""

import sys

from grader.cli import main

if __name__ == "__main__":  # guarded: spawned benchmark workers re-import this module
    sys.exit(main())

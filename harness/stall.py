"""Deadlock detection: every rank of a launch asleep and idle for a few seconds.

A hung launch used to cost its whole wall-clock limit (20-30 s) before the harness reported it.
A rank blocked in a send or receive that will never complete sleeps in the kernel and uses no
CPU; a rank that is computing, or starved of CPU on a loaded machine, is running or runnable.
So when, over the last `after` seconds, the live ranks (and their sidecars, which carry the
traffic of the sidecar transport) were seen running at hardly any sample and used almost no
CPU between them, nothing can change any more: the launch is reported as hung at once, with
every rank's stack, as a timeout would be. `after` is longer than the longest idle wait the
harness itself makes (`harness.cases.ABORT_AFTER_S`, a failed case's rank waiting for its
peers), and a loop that spins is not caught here: it runs into the wall-clock limit as before.
A case that starts or ends (the ranks' case logs, `harness.cases`) is progress: the window
starts again, so that the waits of consecutive failed cases, each of which the harness ends
itself, never add up to a hang.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterable

from harness import procfs

STALL_AFTER_S = 5.0
SAMPLE_EVERY_S = 0.25
BUSY_SHARE = 0.2  # of the samples in the window
IDLE_CPU_SHARE = 0.05  # of one core, all processes together: a blocked rank's threads still
# wake now and then (about 0.01 s of CPU every 2.5 s was measured for a rank blocked in recv)


def _clock_ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return 100


class StallWatch:
    """Call `stalled(pids)` in a polling loop; True once, over the last `after` seconds, a
    thread of the processes was seen running at no more than `BUSY_SHARE` of the samples (a
    blocked thread wakes now and then; a working one, or one waiting for a CPU, is running
    or runnable at nearly every sample) and together they used less than `IDLE_CPU_SHARE` of
    one core."""

    def __init__(self, after: float = STALL_AFTER_S, every: float = SAMPLE_EVERY_S) -> None:
        self.after = after
        self.every = every
        self._budget = IDLE_CPU_SHARE * after * _clock_ticks()  # ticks an idle window may use
        self._samples: deque[tuple[float, int, bool]] = deque()  # (time, ticks, busy)
        self._next = time.monotonic()
        self._progress: object = None

    def stalled(self, pids: Iterable[int],
                progress: Callable[[], object] | None = None) -> bool:
        """`progress()`: anything that changes when the launch moved on without CPU to show for
        it (the ranks' case logs: a case ended, the next began); a change starts a new window.
        """
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.every
        mark = progress() if progress is not None else None
        if mark != self._progress:
            self._progress = mark
            self._samples.clear()
        ticks, busy, seen = 0, False, False
        for pid in pids:
            found = procfs.activity(pid)
            if found is None:
                continue
            seen = True
            ticks += found[0]
            busy |= found[1]
        if not seen:
            self._samples.clear()
            return False
        self._samples.append((now, ticks, busy))
        while now - self._samples[0][0] > self.after:
            self._samples.popleft()
        if len(self._samples) < 2 or now - self._samples[0][0] < self.after * 0.95:
            return False
        used = sum(max(b[1] - a[1], 0) for a, b in zip(self._samples, list(self._samples)[1:]))
        busy_share = sum(s[2] for s in self._samples) / len(self._samples)
        return used <= self._budget and busy_share <= BUSY_SHARE

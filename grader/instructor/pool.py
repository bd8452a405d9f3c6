"""The one pool of graded sessions: selfcheck, mutate and the adversarial corpus run their
sessions (`grader.session.runner.run_session`, each in a worker thread) through `run_pool`.

At most `jobs` tasks run at a time. `take(free)` is asked for up to `free` new tasks whenever a
worker is free (it may give fewer, or none until a running task finishes: selfcheck's margin
runs wait for their solution's run); `on_done(key, value)` gets each finished task's value in
the caller's thread, in the order they finish, and may make new tasks ready. On Ctrl-C, SIGTERM
or an error in a task, the pool cancels what has not started, ends every running session
(`grader.session.runner.stop_all_sessions`) and raises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

from grader.session.runner import stop_all_sessions

K = TypeVar("K")
V = TypeVar("V")
Task = tuple[K, Callable[[], V]]


def run_pool(jobs: int, take: Callable[[int], Iterable[tuple[K, Callable[[], V]]]],
             on_done: Callable[[K, V], None]) -> None:
    """Run the tasks `take` gives, `jobs` at a time, until it gives none and none runs."""
    workers = max(1, jobs)
    running: dict[Future[V], K] = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        def fill() -> None:
            while len(running) < workers:
                found = list(take(workers - len(running)))
                if not found:
                    return
                for key, task in found:
                    running[pool.submit(task)] = key

        try:
            fill()
            while running:
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    key = running.pop(future)
                    on_done(key, future.result())
                fill()
        except BaseException:  # Ctrl-C or SIGTERM: end the running sessions, start no more
            pool.shutdown(wait=False, cancel_futures=True)
            stop_all_sessions()
            raise


def run_each(jobs: int, tasks: Sequence[tuple[K, Callable[[], V]]],
             on_done: Callable[[K, V], None]) -> None:
    """`run_pool` over a list known up front, started in its order."""
    queue = list(tasks)

    def take(free: int) -> list[tuple[K, Callable[[], V]]]:
        found, queue[:free] = queue[:free], []
        return found

    run_pool(jobs, take, on_done)

"""A pool of daemon threads whose calls come back as `concurrent.futures.Future`s: for the probes
a capture waits for until its deadline and then abandons.

A `ThreadPoolExecutor`'s workers are not daemon threads, and `concurrent.futures` joins them when
the interpreter exits: one abandoned call that still waits (on a peer that dawdles, in a name
lookup) keeps the whole process alive past the run's deadline, and a cron `check` so kept holds
its lock. A daemon thread never holds the process at exit.
"""

from __future__ import annotations

import concurrent.futures as cf
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

_Work = tuple[cf.Future[Any], Callable[..., Any], tuple[object, ...]]


class DaemonPool:
    """`workers` daemon threads taking calls in order; `shutdown` cancels the calls not started
    and lets the threads end when their call returns (never waits for them)."""

    def __init__(self, workers: int, name: str) -> None:
        self._queue: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._pending: list[cf.Future[Any]] = []
        self._workers = max(1, workers)
        for i in range(self._workers):
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True).start()

    def submit(self, fn: Callable[..., T], *args: object) -> cf.Future[T]:
        future: cf.Future[T] = cf.Future()
        self._pending.append(future)
        self._queue.put((future, fn, args))
        return future

    def shutdown(self) -> None:
        for future in self._pending:
            future.cancel()  # only a call not started yet is cancelled
        for _ in range(self._workers):
            self._queue.put(None)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                future.set_exception(exc)


Item = TypeVar("Item")


def gather(
    call: Callable[[Item], T],
    items: Sequence[Item],
    *,
    workers: int,
    name: str,
    wait_s: float,
    unfinished: Callable[[Item, cf.Future[T]], T],
) -> list[T]:
    """`call` on every item at once in a `DaemonPool` of `workers` threads, waited for `wait_s`
    at the most; an item whose call did not return by then (still running, never started, or
    raised) is `unfinished(item, future)`. One result per item, in their order; never waits
    for an abandoned call."""
    pool = DaemonPool(workers, name)
    try:
        futures = [pool.submit(call, item) for item in items]
        cf.wait(futures, timeout=wait_s)
    finally:
        pool.shutdown()
    return [
        fut.result() if returned(fut) else unfinished(item, fut)
        for item, fut in zip(items, futures, strict=True)
    ]


def returned(fut: cf.Future[Any]) -> bool:
    """The call ran and returned a value (neither pending, cancelled nor raised)."""
    return fut.done() and not fut.cancelled() and fut.exception() is None

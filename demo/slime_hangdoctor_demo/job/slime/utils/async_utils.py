"""One background asyncio loop per process; rollout coroutines run on it (thread target `_start_loop`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["AsyncLoopThread", "get_async_loop", "run"]


class AsyncLoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._start_loop, daemon=True)
        self._thread.start()

    def _start_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Submit `coro` to the loop thread and block the caller until it finishes (no timeout)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result()


_async_loop: AsyncLoopThread | None = None


def get_async_loop() -> AsyncLoopThread:
    global _async_loop
    if _async_loop is None:
        _async_loop = AsyncLoopThread()
    return _async_loop


def run(coro: Coroutine[Any, Any, T]) -> T:
    return get_async_loop().run(coro)

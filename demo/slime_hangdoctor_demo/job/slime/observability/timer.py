"""`Timer` / `@timer` as in slime: decorated methods show a `wrapper` frame from this file."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


class Timer:
    _instance: Timer | None = None

    def __new__(cls) -> Timer:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
            cls._instance.started = {}
            cls._instance.log_enabled = False
        return cls._instance

    started: dict[str, float]
    log_enabled: bool

    def start(self, name: str) -> None:
        self.started[name] = time.time()
        if self.log_enabled:
            logger.info(f"Timer {name} start")

    def end(self, name: str) -> float:
        elapsed = time.time() - self.started.pop(name, time.time())
        if self.log_enabled:
            logger.info(f"Timer {name} end (elapsed: {elapsed:.1f}s)")
        return elapsed


def timer(func: F) -> F:
    """Time a method; logs `Timer <name> start/end` on global rank 0 only."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        Timer().start(func.__name__)
        try:
            return func(*args, **kwargs)
        finally:
            Timer().end(func.__name__)

    return wrapper  # type: ignore[return-value]


def with_defer(deferred: Callable[[], object]) -> Callable[[F], F]:
    """Run `deferred` after the decorated function returns (slime uses it on `init`)."""

    def decorator(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                deferred()

        return wrapper  # type: ignore[return-value]

    return decorator

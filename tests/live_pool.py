"""Live scenarios of the whole test session, LIVE_SLOTS at a time (CI time on a 2-core machine).

A live scenario is the slow part of a test against something running: start a demo job on a Ray
head, wait for its fault, run the real CLI against it, stop it; it returns what the test checks.
A module registers each scenario by name (`scenario`), and a test names the one it needs with
``@pytest.mark.live(name)`` and asks the session's pool for its result (`LivePool.result`).

At the first such test the pool starts every selected test's scenario, in test order, LIVE_SLOTS
at a time, so that while one test checks its result the next scenarios already run (most of a
scenario is waiting: for Ray, for a fault to settle, for a watchdog's next tick). tests/conftest.py
runs the live tests first, one after another, so nothing else competes with the pool for the CPU.

Each slot has a Ray head of its own, started when a scenario of that slot first asks for one and
shared by every later scenario of that slot: a scenario has its slot, and so its head, to itself
while it runs. A scenario that needs a head of its own (other settings) starts one itself.
"""

from __future__ import annotations

import concurrent.futures as cf
import queue
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from slime_hangdoctor.demo import cluster

LIVE_SLOTS = 2  # two demo jobs at once keep a 2-core box busy without starving either
LIVE_MARK = "live"
RESULT_TIMEOUT_S = 900.0

ScenarioFn = Callable[["Slot"], Any]
SCENARIOS: dict[str, ScenarioFn] = {}
LONG: set[str] = set()  # started before the others: no long one is left to run alone at the end


def scenario(name: str, *, long: bool = False) -> Callable[[ScenarioFn], ScenarioFn]:
    """Register `fn(slot) -> result` as the live scenario `name` (at import, so at collection);
    `long`: one that takes minutes, started first."""

    def register(fn: ScenarioFn) -> ScenarioFn:
        add_scenario(name, fn, long=long)
        return fn

    return register


def add_scenario(name: str, fn: ScenarioFn, *, long: bool = False) -> None:
    if name in SCENARIOS and SCENARIOS[name] is not fn:
        raise ValueError(f"live scenario {name!r} is registered twice")
    SCENARIOS[name] = fn
    if long:
        LONG.add(name)


def live_names(items: Iterable[pytest.Item]) -> list[str]:
    """The scenarios these tests name (``@pytest.mark.live``), each once: the long ones first,
    then the others in test order."""
    names: list[str] = []
    for item in items:
        for mark in item.iter_markers(LIVE_MARK):
            name = str(mark.args[0])
            if name not in names:
                names.append(name)
    return [n for n in names if n in LONG] + [n for n in names if n not in LONG]


class Slot:
    """What a scenario runs with: its slot's shared Ray head (started on first use) and fresh
    temporary directories."""

    def __init__(self, index: int, factory: pytest.TempPathFactory) -> None:
        self.index = index
        self._factory = factory
        self._head: cluster.RayHead | None = None

    @property
    def head(self) -> cluster.RayHead:
        if self._head is None:
            self._head = cluster.start_head(
                self._factory.mktemp(f"live-head-{self.index}"), num_cpus=2, timeout=300.0
            )
        return self._head

    def workdir(self, name: str) -> Path:
        return self._factory.mktemp(name.replace(":", "-"))

    def close(self) -> None:
        if self._head is not None:
            self._head.stop()
            self._head = None


class LivePool:
    """The session's scenarios, run LIVE_SLOTS at a time in the order they were submitted."""

    def __init__(self, factory: pytest.TempPathFactory, slots: int = LIVE_SLOTS) -> None:
        self._slots: queue.Queue[Slot] = queue.Queue()
        self._all = [Slot(i, factory) for i in range(slots)]
        for slot in self._all:
            self._slots.put(slot)
        self._pool = cf.ThreadPoolExecutor(max_workers=slots, thread_name_prefix="live")
        self._futures: dict[str, cf.Future[Any]] = {}
        self._lock = threading.Lock()

    def submit(self, names: Iterable[str]) -> None:
        with self._lock:
            for name in names:
                if name not in self._futures:
                    if name not in SCENARIOS:
                        raise KeyError(f"no live scenario {name!r} (tests/live_pool.py)")
                    self._futures[name] = self._pool.submit(self._run, SCENARIOS[name])

    def _run(self, fn: ScenarioFn) -> Any:
        slot = self._slots.get()
        try:
            return fn(slot)
        finally:
            self._slots.put(slot)

    def result(self, name: str, timeout: float = RESULT_TIMEOUT_S) -> Any:
        """The scenario's result (submitted now if it was not), or the exception it raised."""
        self.submit([name])
        return self._futures[name].result(timeout=timeout)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        for slot in self._all:
            slot.close()

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
import functools
import queue
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from slime_hangdoctor_demo import cluster

LIVE_SLOTS = 2  # two demo jobs at once keep a 2-core box busy without starving either
LIVE_MARK = "live"
RESULT_TIMEOUT_S = 900.0

ScenarioFn = Callable[["Slot"], Any]
SCENARIOS: dict[str, ScenarioFn] = {}
# A shared job: one demo job that several tests' parts run against in turn (one job start, not one
# per test). Its scenario names are "JOB/PART"; the job runs only the parts of selected tests.
JobStart = Callable[["Slot", Path], Any]  # -> a started, ready run with .stop()
PartFn = Callable[[Any, "Slot", Path], Any]  # (the run, the slot, a work dir) -> result
JOBS: dict[str, JobStart] = {}
PARTS: dict[str, dict[str, tuple[int, PartFn]]] = {}
LONG: set[str] = (
    set()
)  # scenarios and shared jobs started before the others (none left alone at the end)


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


def shared_job(name: str, start: JobStart, *, long: bool = False) -> None:
    """Register the shared job `name`: `start(slot, workdir)` returns its run, ready for parts;
    `long`: its parts take minutes together (started first, as a long scenario)."""
    if name in JOBS and JOBS[name] is not start:
        raise ValueError(f"shared job {name!r} is registered twice")
    JOBS[name] = start
    if long:
        LONG.add(name)


def job_part(job: str, part: str, *, order: int = 0) -> Callable[[PartFn], PartFn]:
    """Register `fn(run, slot, workdir) -> result` as the part `part` of the shared job `job`,
    the scenario "JOB/PART"; parts run in `order` (then by name), on the same live job."""

    def register(fn: PartFn) -> PartFn:
        PARTS.setdefault(job, {})[part] = (order, fn)
        return fn

    return register


def _split(name: str) -> tuple[str, str] | None:
    job, sep, part = name.partition("/")
    return (job, part) if sep else None


def live_names(items: Iterable[pytest.Item]) -> list[str]:
    """The scenarios these tests name (``@pytest.mark.live``), each once: the long ones first,
    then the others in test order."""
    names: list[str] = []
    for item in items:
        for mark in item.iter_markers(LIVE_MARK):
            name = str(mark.args[0])
            if name not in names:
                names.append(name)
    long = [n for n in names if n in LONG or (_split(n) or ("",))[0] in LONG]
    return long + [n for n in names if n not in long]


class Slot:
    """What a scenario runs with: its slot's shared Ray head (started on first use) and fresh
    temporary directories."""

    def __init__(self, index: int, factory: pytest.TempPathFactory, lock: threading.Lock) -> None:
        self.index = index
        self._factory = factory
        self._lock = lock  # pytest's TempPathFactory is not thread-safe
        self._head: cluster.RayHead | None = None

    @property
    def head(self) -> cluster.RayHead:
        if self._head is None:
            self._head = cluster.start_head(
                self.workdir(f"live-head-{self.index}"), num_cpus=2, timeout=300.0
            )
        return self._head

    def workdir(self, name: str) -> Path:
        with self._lock:
            return self._factory.mktemp(name.replace(":", "-"))

    def close(self) -> None:
        if self._head is not None:
            self._head.stop()
            self._head = None


class LivePool:
    """The session's scenarios, run LIVE_SLOTS at a time in the order they were submitted."""

    def __init__(self, factory: pytest.TempPathFactory, slots: int = LIVE_SLOTS) -> None:
        factory.getbasetemp()  # made here, once: two threads making it at once got two of them
        tmp_lock = threading.Lock()
        self._slots: queue.Queue[Slot] = queue.Queue()
        self._all = [Slot(i, factory, tmp_lock) for i in range(slots)]
        for slot in self._all:
            self._slots.put(slot)
        self._pool = cf.ThreadPoolExecutor(max_workers=slots, thread_name_prefix="live")
        self._futures: dict[str, cf.Future[Any]] = {}
        self._lock = threading.Lock()

    def submit(self, names: Iterable[str]) -> None:
        """Start these scenarios (those not started yet), in order; the parts of one shared job
        named here run as one scenario, at the place of the first of them."""
        names = list(names)
        with self._lock:
            for name in names:
                if name in self._futures:
                    continue
                split = _split(name)
                if split is None:
                    if name not in SCENARIOS:
                        raise KeyError(f"no live scenario {name!r} (tests/live_pool.py)")
                    self._futures[name] = self._pool.submit(self._run, SCENARIOS[name])
                    continue
                job = split[0]
                if job not in JOBS:
                    raise KeyError(f"no shared job {job!r} (tests/live_pool.py)")
                parts = [p for n in names if (sp := _split(n)) and sp[0] == job for p in [sp[1]]]
                parts = [p for p in parts if f"{job}/{p}" not in self._futures]
                unknown = [p for p in parts if p not in PARTS.get(job, {})]
                if unknown:
                    raise KeyError(f"shared job {job!r} has no parts {unknown}")
                future = self._pool.submit(self._run, functools.partial(_run_job, job, parts))
                for part in parts:
                    self._futures[f"{job}/{part}"] = future

    def _run(self, fn: ScenarioFn) -> Any:
        slot = self._slots.get()
        try:
            return fn(slot)
        finally:
            self._slots.put(slot)

    def result(self, name: str, timeout: float = RESULT_TIMEOUT_S) -> Any:
        """The scenario's result (submitted now if it was not), or the exception it raised."""
        self.submit([name])
        got = self._futures[name].result(timeout=timeout)
        split = _split(name)
        if split is None:
            return got
        part = got[split[1]]
        if isinstance(part, BaseException):
            raise part
        return part

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        for slot in self._all:
            slot.close()


def _run_job(job: str, parts: list[str], slot: Slot) -> dict[str, Any]:
    """Start the shared job once, run the parts in their order on it, stop it: each part's
    result, or the exception it raised (the job's own failure is every part's)."""
    work = slot.workdir(job)
    results: dict[str, Any] = {}
    try:
        run = JOBS[job](slot, work)
    except BaseException as exc:  # noqa: BLE001 - each part's test re-raises it
        return dict.fromkeys(parts, exc)
    try:
        for part in sorted(parts, key=lambda p: (PARTS[job][p][0], p)):
            try:
                results[part] = PARTS[job][part][1](run, slot, slot.workdir(f"{job}-{part}"))
            except BaseException as exc:  # noqa: BLE001 - re-raised by the part's test
                results[part] = exc
    finally:
        run.stop()
    return results

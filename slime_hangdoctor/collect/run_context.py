"""What one collection run knows before it samples, and what it must finish before its bundle is.

`RunContext` is immutable: the options, the deadline, the writer, the probe pool, the address as
given, this machine's addresses, the Ray cluster connected to (`RayConnection`), when the second
sample is due, and where this collector stands in the cluster (`Here`, known from the first
sample on: the phases pass a replaced context on, never change one). `Background` is the run's one
mutable object, owned by `collect()`: the threads it joins and the Ray driver it closes before the
bundle is finished. Each sample's findings are returned by the sample (`run_sample.SampleResult`).
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Callable
from dataclasses import dataclass

from slime_hangdoctor.bundle import BundleWriter
from slime_hangdoctor.collect.dashboard import DashboardClient
from slime_hangdoctor.collect.options import CollectOptions, Deadline
from slime_hangdoctor.collect.remote import RayTasks
from slime_hangdoctor.parsers.pyspy import PYSPY
from slime_hangdoctor.sources import SPECS

ProgressFn = Callable[[str], None]


@dataclass(frozen=True)
class RayConnection:
    """The Ray cluster this run reads: its dashboard's client, its GCS if known, and whether the
    Ray token may go to them (address.Cluster.token_ok)."""

    client: DashboardClient
    gcs_address: str | None
    token_ok: bool


@dataclass(frozen=True)
class Here:
    """Where this collector stands, as the first sample's Ray state tells: its Ray node (None
    where it knows none) and the GCS (the connection's, else the one the dashboard names)."""

    node_ip: str | None = None
    node_id: str | None = None
    gcs_address: str | None = None


@dataclass(frozen=True)
class RunContext:
    writer: BundleWriter
    opts: CollectOptions
    deadline: Deadline
    pool: cf.ThreadPoolExecutor
    say: ProgressFn
    address: str | None  # as given (the cluster whose processes the local scan keeps)
    local_ips: frozenset[str]
    ray: RayConnection | None  # None: --local, or no Ray cluster could be read
    window_end: float  # epoch seconds: when the second sample is due
    here: Here = Here()

    @property
    def client(self) -> DashboardClient | None:
        return self.ray.client if self.ray is not None else None

    @property
    def token_ok(self) -> bool:
        """May the Ray token go to this dashboard and the GCS it names? (True without a cluster)"""
        return self.ray.token_ok if self.ray is not None else True

    @property
    def node_ip(self) -> str | None:
        return self.here.node_ip


class Background:
    """What a run has started and must finish before its bundle is: the threads joined at the
    end (window probes, GPU sampling, the first sample's other nodes, the pre-parse), and the
    doctor's Ray driver (opened at the first sample that has other nodes, closed at the end).
    The one mutable object of a run: `collect()` owns it and passes it where things start."""

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []
        self._tasks: RayTasks | None = None

    def start(self, target: Callable[[], object], name: str) -> threading.Thread:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)
        return thread

    def add(self, thread: threading.Thread) -> None:
        self._threads.append(thread)

    def join(self, deadline: Deadline, each_s: float) -> None:
        """Join every thread, each for `each_s` at most, all within the deadline."""
        for thread in list(self._threads):
            thread.join(timeout=deadline.clamp(each_s))

    @property
    def tasks(self) -> RayTasks | None:
        return self._tasks

    def open_tasks(self, start: Callable[[], RayTasks]) -> RayTasks:
        """The run's Ray driver, started by `start` the first time it is asked for."""
        if self._tasks is None:
            self._tasks = start()
        return self._tasks

    def close(self) -> None:
        """Nothing more is asked of the other nodes."""
        if self._tasks is not None:
            self._tasks.close_soon()


def sources_off(opts: CollectOptions, *, second_stacks: bool = True) -> frozenset[str]:
    """The sources this run turned off (a spec's `switch`: a CollectOptions flag that is False);
    py-spy's also at the second sample of the watchdog's look (`second_stacks` False)."""
    off = {s.name for s in SPECS if s.switch is not None and not getattr(opts, s.switch)}
    if not second_stacks:
        off.add(PYSPY)
    return frozenset(off)


def local_spec_off(opts: CollectOptions, index: int) -> frozenset[str]:
    return sources_off(opts, second_stacks=not (opts.stacks_only_if_stalled and index == 1))


def read_before(
    writer: BundleWriter, node_ip: str | None
) -> tuple[tuple[str, frozenset[int]], ...]:
    """(source, pids) of the records this run holds of `node_ip`'s processes, by source: a source
    that reads each process once a run (the log heads) skips those."""
    out: dict[str, set[int]] = {}
    for rec in writer.records:
        pid = rec.meta.get("pid")
        if rec.node_ip == node_ip and isinstance(pid, int):
            out.setdefault(rec.source, set()).add(pid)
    return tuple((source, frozenset(pids)) for source, pids in sorted(out.items()))

"""The analysis input: every fact parsed out of one bundle, tagged with where and when it was seen.

`Snapshot` is built by `slime_hangdoctor.load.load_snapshot(bundle)`; the analysis reads nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar

from slime_hangdoctor.bundle import Manifest
from slime_hangdoctor.facts import (
    ClusterResources,
    GpuSeries,
    LogTail,
    ObjectStoreUsage,
    ProcessInfo,
    ProcessStack,
    RayActor,
    RayJob,
    RayNode,
    RayPlacementGroup,
    RayTask,
)
from slime_hangdoctor.http_facts import (
    EngineLoad,
    HttpAnswer,
    ModelInfo,
    RouterMetrics,
    RouterWorkers,
    ServerInfo,
    SglangMetrics,
)
from slime_hangdoctor.parsers import processes
from slime_hangdoctor.source_spec import Observed, SourceSpec

F = TypeVar("F")

Parsed = ServerInfo | ModelInfo | EngineLoad | SglangMetrics | RouterWorkers | RouterMetrics | None


class StackVia(str, Enum):
    """Who read a stack: py-spy, or Ray's dashboard (/worker/traceback)."""

    PYSPY = "pyspy"
    DASHBOARD = "dashboard"


class HttpPeer(str, Enum):
    """Whose HTTP answer: an SGLang engine's, a router's, or a server only a router lists (not
    one of the job's engines: topology.Engine.listed_only, probed without the API key)."""

    ENGINE = "engine"
    ROUTER = "router"
    LISTED = "listed"


class GpuVia(str, Enum):
    """Who read a GPU series: the local NVML sampler, or Ray's node summary (util and power only)."""

    NVML = "nvml"
    RAY_SUMMARY = "ray_summary"


class LogOwner(str, Enum):
    """Whose log a tail is: the job's driver's, or one slime actor's stream."""

    DRIVER = "driver"
    ACTOR = "actor"


@dataclass(frozen=True)
class StackObs:
    node_ip: str | None
    pid: int
    sample: int
    stack: ProcessStack
    via: StackVia = StackVia.PYSPY


@dataclass(frozen=True)
class HttpObs:
    """One HTTP answer of an engine or router, with its parsed body where it parsed."""

    kind: HttpPeer
    sample: int
    answer: HttpAnswer
    parsed: Parsed = None
    parse_error: str | None = None


@dataclass(frozen=True)
class GpuObs:
    node_ip: str | None
    series: GpuSeries
    via: GpuVia = GpuVia.NVML


@dataclass(frozen=True)
class LogObs:
    """The tail of one log: a job's driver log or one stream (err / out) of an actor."""

    kind: LogOwner
    tail: LogTail
    node_ip: str | None = None
    actor_id: str | None = None
    class_name: str | None = None
    pid: int | None = None
    submission_id: str | None = None
    suffix: str | None = None  # err | out (actors)
    fetched_at: float = 0.0
    truncated: bool = False

    @property
    def label(self) -> str:
        if self.kind is LogOwner.DRIVER:
            return f"driver log ({self.submission_id})"
        return f"{self.class_name} log (pid {self.pid}, {self.suffix})"


@dataclass(frozen=True)
class TaskPageObs:
    """One answer of the task history / queue queries (every state, parent ids, times)."""

    target: str  # tasks_unfinished | tasks_job_<id>
    sample: int
    time: float  # when it was asked (epoch seconds)
    tasks: tuple[RayTask, ...]
    truncated: bool = False


@dataclass(frozen=True)
class Snapshot:
    manifest: Manifest
    actors: tuple[RayActor, ...] = ()
    tasks: tuple[RayTask, ...] = ()
    nodes: tuple[RayNode, ...] = ()
    jobs: tuple[RayJob, ...] = ()
    stacks: tuple[StackObs, ...] = ()
    http: tuple[HttpObs, ...] = ()
    gpus: tuple[GpuObs, ...] = ()
    logs: tuple[LogObs, ...] = ()
    task_pages: tuple[TaskPageObs, ...] = ()
    placement_groups: tuple[RayPlacementGroup, ...] = ()
    cluster: ClusterResources | None = None  # the newest /api/cluster_status answer
    object_stores: tuple[ObjectStoreUsage, ...] = ()  # each node's, from the newest node summary
    # the facts of every source the loader files by its spec (source_spec.SourceSpec.parse), in
    # the bundle's order: read them with facts(SPEC)
    observed: tuple[Observed[Any], ...] = ()
    blind_spots: tuple[str, ...] = ()  # probes that failed or were not allowed, parse failures
    ray_seen: bool = False  # the Ray state API answered
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def window_s(self) -> float:
        return self.manifest.window_s

    def facts(self, spec: SourceSpec[F]) -> tuple[Observed[F], ...]:
        """Every fact of one source, in the bundle's order."""
        by_source = self.__dict__.get("_by_source")
        if by_source is None:
            grouped: dict[str, list[Observed[Any]]] = {}
            for obs in self.observed:
                grouped.setdefault(obs.source, []).append(obs)
            by_source = {name: tuple(group) for name, group in grouped.items()}
            object.__setattr__(self, "_by_source", by_source)
        found: tuple[Observed[F], ...] = by_source.get(spec.name, ())
        return found

    def stacks_of(self, pid: int, node_ip: str | None = None) -> tuple[StackObs, ...]:
        return tuple(
            s
            for s in self.stacks
            if s.pid == pid and (node_ip is None or s.node_ip in (None, node_ip))
        )

    def processes_at(self, sample: int) -> tuple[ProcessInfo, ...]:
        return tuple(
            p for obs in self.facts(processes.SPEC) if obs.sample == sample for p in obs.fact
        )

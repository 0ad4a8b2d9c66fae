"""Ray dashboard answers -> facts. Pure: bytes/str in, frozen facts out, ParseError on bad input.

Endpoints (Ray 2.60, the shapes of the real answers in tests/fixtures/real/gpu-2xh200-ray-nccl-hang):

- ``/api/v0/actors``, ``/api/v0/tasks``, ``/api/v0/nodes`` (state API):
  ``{"result": true, "msg": "", "data": {"result": {"total": N, ..., "result": [row, ...]}}}``.
  ``"result": false`` is an error answer: its ``msg`` becomes the ParseError.
- ``/api/jobs/`` (Job API): a JSON list of jobs; the driver pid is a *string* in ``driver_info.pid``.
- ``/nodes?view=summary``: ``{"data": {"summary": [node, ...]}}``; each node carries ``ip`` and
  ``gpus[]`` as Ray's agent read them from NVML (``utilizationGpu``, ``powerMw``, ``memoryUsed`` MiB,
  ``processesPids[{pid, gpuMemoryUsage MiB, gpuUtilization}]``). `parse_node_summary` turns that into
  one single-sample `GpuSeries` per node: it reaches the GPUs of nodes the doctor does not run on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, TypeVar, get_args

from slime_hangdoctor.bundle import ProbeRecord
from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.facts import GpuReading, GpuSample, GpuSeries
from slime_hangdoctor.parsers.json_text import load_json
from slime_hangdoctor.source_spec import Facts, Join, Observed, SourceSpec

# the source's name: the `source` of its probe records, the folder of its artefacts under raw/
RAY_DASHBOARD = "ray_dashboard"  # one dashboard answer; meta: endpoint, status

T = TypeVar("T")
StateT = TypeVar("StateT", bound=str)

_MIB = 1024 * 1024


# --------------------------------------------------------------------------- public parsers


# --------------------------------------------------------------------------- facts


# Ray's states as Ray itself types them: copied from Ray 2.60's
# ray/_private/custom_types.py (TypeActorStatus, TypeTaskStatus, TypeNodeStatus,
# TypePlacementGroupStatus; ray/util/state/common.py types its state rows with them, and the
# deprecated ray/experimental/state/custom_types.py re-exports them), and from the values of
# ray.job_submission.JobStatus (ray/dashboard/modules/job/common.py) for jobs.
# tests/unit/test_ray_states.py compares each with the installed Ray's, so an upgrade that adds a
# state fails there first. A state a newer Ray sends that is not here is read as UNKNOWN, and its
# text kept in the fact's `raw_state` / `raw_status` (never a crash, never a guess).
ActorState = Literal["DEPENDENCIES_UNREADY", "PENDING_CREATION", "ALIVE", "RESTARTING", "DEAD"]


TaskState = Literal[
    "NIL",
    "PENDING_ARGS_AVAIL",
    "PENDING_NODE_ASSIGNMENT",
    "PENDING_OBJ_STORE_MEM_AVAIL",
    "PENDING_ARGS_FETCH",
    "SUBMITTED_TO_WORKER",
    "PENDING_ACTOR_TASK_ARGS_FETCH",
    "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY",
    "RUNNING",
    "RUNNING_IN_RAY_GET",
    "RUNNING_IN_RAY_WAIT",
    "FINISHED",
    "FAILED",
    "GETTING_AND_PINNING_ARGS",
]


NodeState = Literal["ALIVE", "DEAD"]


PlacementGroupState = Literal["PENDING", "PREPARED", "CREATED", "REMOVED", "RESCHEDULING"]


JobStatus = Literal["PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED"]


# Ray sent no state, or one not above (a newer Ray's): none of Ray's literals has this value.
UnknownState = Literal["UNKNOWN"]


UNKNOWN_STATE: Final[UnknownState] = "UNKNOWN"


# The states the analysis and the collector decide on. Compare with these, never with bare text:
# mypy rejects a constant or a set member that is not one of Ray's states.
ACTOR_ALIVE: Final[ActorState] = "ALIVE"


ACTOR_DEAD: Final[ActorState] = "DEAD"


# an actor Ray is still creating (its constructor runs or waits for its arguments)
ACTOR_BEING_CREATED: Final[frozenset[ActorState]] = frozenset(
    {"PENDING_CREATION", "DEPENDENCIES_UNREADY"}
)


NODE_ALIVE: Final[NodeState] = "ALIVE"


TASK_RUNNING: Final[TaskState] = "RUNNING"


TASK_FINISHED: Final[TaskState] = "FINISHED"


TASK_FAILED: Final[TaskState] = "FAILED"


# a task that runs, also while it blocks in ray.get / ray.wait
TASK_RUNNING_ANY: Final[frozenset[TaskState]] = frozenset(
    {"RUNNING", "RUNNING_IN_RAY_GET", "RUNNING_IN_RAY_WAIT"}
)


TASK_ENDED: Final[frozenset[TaskState]] = frozenset({TASK_FINISHED, TASK_FAILED})


# a placement group that waits for its resources (not placed yet, or re-placed after a node died)
PLACEMENT_GROUP_WAITING: Final[frozenset[PlacementGroupState]] = frozenset(
    {"PENDING", "RESCHEDULING"}
)


JOB_RUNNING: Final[JobStatus] = "RUNNING"


# Ray 2.60's placement-group scheduling states (gcs.proto SchedulingState), UNKNOWN for a newer one
PlacementSchedulingState = Literal[
    "QUEUED", "REMOVED", "SCHEDULING_STARTED", "NO_RESOURCES", "INFEASIBLE", "FINISHED", "UNKNOWN"
]


PG_SCHEDULING_STATES: Final[frozenset[str]] = frozenset(get_args(PlacementSchedulingState))


PG_INFEASIBLE: Final[PlacementSchedulingState] = "INFEASIBLE"


# Ray 2.60's task types (common.proto TaskType), UNKNOWN for a newer one
RayTaskType = Literal["NORMAL_TASK", "ACTOR_CREATION_TASK", "ACTOR_TASK", "DRIVER_TASK", "UNKNOWN"]


DRIVER_TASK: Final[RayTaskType] = "DRIVER_TASK"


ACTOR_CREATION_TASK: Final[RayTaskType] = "ACTOR_CREATION_TASK"


@dataclass(frozen=True)
class RayActor:
    actor_id: str
    class_name: str
    state: ActorState | UnknownState
    pid: int | None
    node_id: str | None
    name: str | None = None
    job_id: str | None = None
    ray_namespace: str | None = None
    node_ip: str | None = None
    repr_name: str | None = None
    death: ActorDeath | None = None  # detail=1 only
    placement_group_id: str | None = None
    raw_state: str | None = None  # what Ray sent where `state` is UNKNOWN (a newer Ray's state)


@dataclass(frozen=True)
class RayTask:
    task_id: str
    name: str  # e.g. "MegatronTrainRayActor.update_weights"
    state: TaskState | UnknownState
    actor_id: str | None = None
    worker_pid: int | None = None
    node_id: str | None = None
    job_id: str | None = None
    start_time_ms: int | None = None
    # History and wait-for fields (``/api/v0/tasks?detail=1``; None where Ray did not say).
    task_type: RayTaskType | None = None
    parent_task_id: str | None = None
    end_time_ms: int | None = None
    creation_time_ms: int | None = None
    error_type: str | None = None  # e.g. ACTOR_DIED, TASK_EXECUTION_EXCEPTION
    raw_state: str | None = None  # what Ray sent where `state` is UNKNOWN (a newer Ray's state)

    @property
    def method(self) -> str:
        """The method name: ``SGLangEngine.pause_generation`` -> ``pause_generation``; an actor
        creation task ``e0:SGLangEngine.__init__`` -> ``__init__``."""
        return self.name.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class TaskPage:
    """One ``/api/v0/tasks`` answer: its rows and how many Ray had before it truncated them.

    Ray sorts the rows by task id before it applies ``limit``, so a truncated page is an arbitrary
    subset, not the newest tasks: `truncated` tells the analysis not to trust its absences."""

    tasks: tuple[RayTask, ...]
    total: int | None = None  # tasks the GCS knew (incl. events it dropped)
    num_filtered: int | None = None  # tasks that matched the filters, before `limit`

    @property
    def truncated(self) -> bool:
        return self.num_filtered is not None and self.num_filtered > len(self.tasks)


@dataclass(frozen=True)
class ActorDeath:
    """Why Ray says an actor died (``death_cause`` of ``/api/v0/actors?detail=1``)."""

    reason: str | None  # e.g. WORKER_DIED, OUT_OF_MEMORY, RAY_KILL, NODE_DIED, USER_EXIT ...
    message: str | None  # Ray's error message (cut to a few hundred characters)
    exit_type: str | None = None  # "Worker exit type: SYSTEM_ERROR" -> SYSTEM_ERROR
    exit_detail: str | None = None  # "Worker exit detail: ..." up to the first sentence end
    never_started: bool | None = None
    kind: str = "actor_died_error_context"  # the death_cause key Ray used


@dataclass(frozen=True)
class PlacementBundle:
    index: int
    resources: Mapping[str, float]
    node_id: str | None = None  # None: not placed yet


@dataclass(frozen=True)
class RayPlacementGroup:
    """One row of ``/api/v0/placement_groups?detail=1``."""

    placement_group_id: str
    state: PlacementGroupState | UnknownState
    name: str | None = None
    creator_job_id: str | None = None
    bundles: tuple[PlacementBundle, ...] = ()
    scheduling_state: PlacementSchedulingState | None = None  # stats.scheduling_state
    scheduling_attempt: int | None = None
    created_ns: int | None = None  # stats.creation_request_received_ns
    raw_state: str | None = None  # what Ray sent where `state` is UNKNOWN (a newer Ray's state)

    def demand(self) -> dict[str, float]:
        """Resources of all bundles together."""
        out: dict[str, float] = {}
        for b in self.bundles:
            for key, amount in b.resources.items():
                out[key] = out.get(key, 0.0) + amount
        return out


@dataclass(frozen=True)
class PlacementDemand:
    """One pending placement-group demand of ``/api/cluster_status`` (``pgDemand``)."""

    bundles: tuple[tuple[Mapping[str, float], int], ...]  # (bundle resources, how many of them)
    strategy: str | None  # PACK | SPREAD | STRICT_PACK | STRICT_SPREAD
    count: int = 1  # identical groups waiting

    def total(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for resources, n in self.bundles:
            for key, amount in resources.items():
                out[key] = out.get(key, 0.0) + amount * n
        return out


@dataclass(frozen=True)
class ClusterResources:
    """The autoscaler's view (``/api/cluster_status``): capacity, use and what waits for it."""

    total: Mapping[str, float]  # resource -> amount in the whole cluster
    used: Mapping[str, float]
    per_node_total: tuple[Mapping[str, float], ...] = ()  # one mapping per node
    pg_demands: tuple[PlacementDemand, ...] = ()
    # resourceDemand: tasks and actors waiting for resources: (resources, how many)
    task_demands: tuple[tuple[Mapping[str, float], int], ...] = ()
    time: float | None = None
    # each node's object store fill in the GCS's resource view (``usageByNode`` ->
    # ``objectStoreMemory`` [used, total]): as fresh as the raylet's last resource report, where the
    # node summary's store readings are up to NODE_STATS_UPDATE_INTERVAL_SECONDS (15 s) old
    stores: tuple[ObjectStoreUsage, ...] = ()


@dataclass(frozen=True)
class ObjectStoreUsage:
    """One node's plasma object store as its raylet reports it (``/nodes?view=summary``:
    ``raylet.objectStoreUsedMemory``, ``raylet.objectStoreAvailableMemory`` and the
    ``raylet.storeStats`` counters, which Ray leaves out where they are zero; the dashboard
    refreshes them every 15 s). The joined state takes the fill (used and available bytes) from the
    cluster status's GCS resource view where it has the node: each raylet reports it there with
    its resources, so it is seconds fresher (``ClusterResources.stores``)."""

    node_id: str | None
    node_ip: str | None
    used_bytes: int
    available_bytes: int
    primary_copy_bytes: int = 0  # objects this node created (spillable); the rest are copies
    spilled_bytes: int = 0  # spilled to external storage since the node started
    local_objects: int = 0
    pulls_queued: bool = False  # the raylet's PullManager holds pulls it has no room for

    @property
    def capacity_bytes(self) -> int:
        return self.used_bytes + self.available_bytes

    @property
    def used_fraction(self) -> float:
        cap = self.capacity_bytes
        return self.used_bytes / cap if cap > 0 else 0.0


@dataclass(frozen=True)
class RayNode:
    node_id: str
    node_ip: str
    state: NodeState | UnknownState
    is_head: bool = False
    hostname: str | None = None
    raw_state: str | None = None  # what Ray sent where `state` is UNKNOWN (a newer Ray's state)


@dataclass(frozen=True)
class RayJob:
    job_id: str | None
    submission_id: str | None
    status: JobStatus | UnknownState
    entrypoint: str | None = None
    driver_pid: int | None = None
    driver_node_ip: str | None = None
    raw_status: str | None = None  # what Ray sent where `status` is UNKNOWN (a newer Ray's status)


def parse_actors(body: bytes | str) -> tuple[RayActor, ...]:
    """Rows of ``/api/v0/actors`` (any detail level)."""
    return _rows(_state_rows(body, "actors"), _actor, "actor")


def parse_tasks(body: bytes | str) -> tuple[RayTask, ...]:
    """Rows of ``/api/v0/tasks`` (usually filtered to state=RUNNING)."""
    return _rows(_state_rows(body, "tasks"), _task, "task")


def parse_task_page(body: bytes | str) -> TaskPage:
    """``/api/v0/tasks`` with the counts Ray gives beside the rows (to tell a truncated page)."""
    data = _envelope_data(_load(body, "tasks"), "tasks")
    page = data.get("result")
    rows = _state_rows(body, "tasks")
    total = num_filtered = None
    if isinstance(page, Mapping):
        total = _opt_int(page.get("total"), "total")
        num_filtered = _opt_int(page.get("num_filtered"), "num_filtered")
    return TaskPage(_rows(rows, _task, "task"), total, num_filtered)


def parse_placement_groups(body: bytes | str) -> tuple[RayPlacementGroup, ...]:
    """Rows of ``/api/v0/placement_groups?detail=1`` (without detail: no bundles, no stats)."""
    return _rows(_state_rows(body, "placement groups"), _placement_group, "placement group")


# the object store's resource in the dashboard's camel-cased cluster status (Ray's
# `object_store_memory`)
STORE_RESOURCE = "objectStoreMemory"


def parse_cluster_status(body: bytes | str) -> ClusterResources:
    """``/api/cluster_status``: ``data.clusterStatus.loadMetricsReport`` (Ray 2.60): ``usage``
    {resource: [used, total]}, ``usageByNode`` {node: usage}, ``pgDemand`` [[{bundles, strategy},
    count]], ``resourceDemand`` [[{resource: amount}, count]]."""
    data = _envelope_data(_load(body, "cluster status"), "cluster status")
    status = data.get("clusterStatus")
    if not isinstance(status, Mapping):
        raise ParseError("cluster status: no data.clusterStatus object")
    report = status.get("loadMetricsReport")
    if not isinstance(report, Mapping):
        raise ParseError("cluster status: no loadMetricsReport object")
    total, used = _usage(report.get("usage"), "usage")
    by_node = report.get("usageByNode") or {}
    if not isinstance(by_node, Mapping):
        raise ParseError("cluster status: usageByNode is not an object")
    per_node_usage = {str(n): _usage(u, f"usageByNode.{n}") for n, u in by_node.items()}
    per_node = tuple(total for total, _used in per_node_usage.values())
    return ClusterResources(
        total=total,
        used=used,
        per_node_total=per_node,
        pg_demands=tuple(_pg_demand(d, i) for i, d in enumerate(_list(report, "pgDemand"))),
        task_demands=tuple(
            _counted(d, f"resourceDemand {i}")
            for i, d in enumerate(_list(report, "resourceDemand"))
        ),
        time=_opt_float(status.get("time"), "time"),
        stores=tuple(
            ObjectStoreUsage(
                node_id=node,
                node_ip=None,
                used_bytes=int(used[STORE_RESOURCE]),
                available_bytes=max(0, int(total[STORE_RESOURCE] - used[STORE_RESOURCE])),
            )
            for node, (total, used) in per_node_usage.items()
            if total.get(STORE_RESOURCE, 0.0) > 0
        ),
    )


def parse_nodes(body: bytes | str) -> tuple[RayNode, ...]:
    """Rows of ``/api/v0/nodes``."""
    return _rows(_state_rows(body, "nodes"), _node, "node")


def parse_jobs(body: bytes | str) -> tuple[RayJob, ...]:
    """The Job API list ``/api/jobs/`` (submission jobs and plain drivers)."""
    doc = _load(body, "jobs")
    if isinstance(doc, Mapping) and "result" in doc and doc.get("result") is False:
        raise ParseError(f"jobs: the dashboard answered an error: {doc.get('msg')!r}")
    if not isinstance(doc, list):
        raise ParseError(f"jobs: expected a JSON list, got {type(doc).__name__}")
    return _rows(doc, _job, "job")


def parse_node_summary(body: bytes | str) -> tuple[GpuSeries, ...]:
    """``/nodes?view=summary`` -> one single-sample GPU series per node (nodes without GPUs too)."""
    doc = _load(body, "node summary")
    data = _envelope_data(doc, "node summary")
    summary = data.get("summary")
    if not isinstance(summary, list):
        raise ParseError("node summary: data.summary is not a list")
    out: list[GpuSeries] = []
    for i, node in enumerate(summary):
        if not isinstance(node, Mapping):
            raise ParseError(f"node summary: entry {i} is not an object")
        gpus = node.get("gpus") or []
        if not isinstance(gpus, list):
            raise ParseError(f"node summary: entry {i} has a non-list 'gpus'")
        readings = tuple(_summary_gpu(g, i, j) for j, g in enumerate(gpus))
        out.append(
            GpuSeries(
                samples=(GpuSample(t=0.0, gpus=readings),),
                driver=None,
                node_ip=_opt_str(node.get("ip")),
            )
        )
    return tuple(out)


def parse_object_stores(body: bytes | str) -> tuple[ObjectStoreUsage, ...]:
    """``/nodes?view=summary`` -> each node's object store, from its ``raylet`` entry. The dashboard
    refreshes these readings every 15 s (Ray's ``NODE_STATS_UPDATE_INTERVAL_SECONDS``); a node it
    has not read yet has no store stats and a capacity of 0: no entry here."""
    data = _envelope_data(_load(body, "node summary"), "node summary")
    summary = data.get("summary")
    if not isinstance(summary, list):
        raise ParseError("node summary: data.summary is not a list")
    out: list[ObjectStoreUsage] = []
    for i, node in enumerate(summary):
        raylet = node.get("raylet") if isinstance(node, Mapping) else None
        if not isinstance(raylet, Mapping) or "objectStoreAvailableMemory" not in raylet:
            continue
        stats = raylet.get("storeStats") or {}
        if not isinstance(stats, Mapping):
            raise ParseError(f"node summary: entry {i} has a non-object raylet.storeStats")
        where = f"node summary entry {i}"
        used = _opt_int(raylet.get("objectStoreUsedMemory"), where) or 0
        available = _opt_int(raylet.get("objectStoreAvailableMemory"), where) or 0
        if used + available <= 0:
            continue
        out.append(
            ObjectStoreUsage(
                node_id=_opt_str(raylet.get("nodeId")),
                node_ip=_opt_str(node.get("ip")),
                used_bytes=used,
                available_bytes=available,
                primary_copy_bytes=_opt_int(stats.get("objectStoreBytesPrimaryCopy"), where) or 0,
                spilled_bytes=_opt_int(stats.get("spilledBytesTotal"), where) or 0,
                local_objects=_opt_int(stats.get("numLocalObjects"), where) or 0,
                pulls_queued=stats.get("objectPullsQueued") is True,
            )
        )
    return tuple(out)


# --------------------------------------------------------------------------- envelopes


def _load(body: bytes | str, what: str) -> Any:
    return load_json(body, what)


def _envelope_data(doc: Any, what: str) -> Mapping[str, Any]:
    """The ``data`` of a dashboard ``{"result": bool, "msg": str, "data": {...}}`` answer."""
    if not isinstance(doc, Mapping):
        raise ParseError(f"{what}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("result") is False:
        raise ParseError(f"{what}: the dashboard answered an error: {doc.get('msg')!r}")
    data = doc.get("data")
    if not isinstance(data, Mapping):
        raise ParseError(f"{what}: no 'data' object in the answer")
    return data


def _state_rows(body: bytes | str, what: str) -> list[Any]:
    data = _envelope_data(_load(body, what), what)
    result = data.get("result")
    if isinstance(
        result, Mapping
    ):  # Ray >= 2.1: {"total", "num_after_truncation", "result": [...]}
        result = result.get("result")
    if not isinstance(result, list):
        raise ParseError(f"{what}: data.result.result is not a list")
    return result


def _rows(rows: list[Any], one: Callable[[Mapping[str, Any]], T], what: str) -> tuple[T, ...]:
    out: list[T] = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ParseError(f"{what} row {i} is not an object")
        try:
            out.append(one(row))
        except ParseError as exc:
            raise ParseError(f"{what} row {i}: {exc}") from None
    return tuple(out)


# --------------------------------------------------------------------------- states

# Ray's text -> our typed state (facts.py copies Ray's literals); anything else is UNKNOWN.
_ACTOR_STATES: Final[Mapping[str, ActorState]] = {s: s for s in get_args(ActorState)}
_TASK_STATES: Final[Mapping[str, TaskState]] = {s: s for s in get_args(TaskState)}
_NODE_STATES: Final[Mapping[str, NodeState]] = {s: s for s in get_args(NodeState)}
_PLACEMENT_GROUP_STATES: Final[Mapping[str, PlacementGroupState]] = {
    s: s for s in get_args(PlacementGroupState)
}
_JOB_STATUSES: Final[Mapping[str, JobStatus]] = {s: s for s in get_args(JobStatus)}


def _task_type(value: Any) -> RayTaskType | None:
    """A task's type; one a newer Ray adds is UNKNOWN."""
    text = _opt_str(value)
    return None if text is None else _TASK_TYPES.get(text, UNKNOWN_STATE)


_TASK_TYPES: Mapping[str, RayTaskType] = {s: s for s in get_args(RayTaskType)}


def _scheduling_state(value: Any) -> PlacementSchedulingState | None:
    """A placement group's scheduling state; one a newer Ray adds is UNKNOWN."""
    text = _opt_str(value)
    return None if text is None else _SCHEDULING_STATES.get(text, UNKNOWN_STATE)


_SCHEDULING_STATES: Mapping[str, PlacementSchedulingState] = {
    s: s for s in get_args(PlacementSchedulingState)
}


def _state(value: Any, known: Mapping[str, StateT]) -> tuple[StateT | UnknownState, str | None]:
    """(state, raw text): a state Ray sent that `known` lacks (a newer Ray's) is UNKNOWN with its
    text kept, cut to 80 characters; no state at all is UNKNOWN without text."""
    text = _opt_str(value)
    if text is None:
        return UNKNOWN_STATE, None
    state = known.get(text)
    return (UNKNOWN_STATE, text[:80]) if state is None else (state, None)


# --------------------------------------------------------------------------- rows


def _actor(row: Mapping[str, Any]) -> RayActor:
    address = row.get("address")
    node_ip = None
    if isinstance(address, Mapping):  # older Ray versions put the worker address here
        node_ip = _opt_str(address.get("ip_address") or address.get("ipAddress"))
    state, raw_state = _state(row.get("state"), _ACTOR_STATES)
    return RayActor(
        actor_id=_req_str(row, "actor_id"),
        class_name=_opt_str(row.get("class_name")) or "",
        state=state,
        pid=_pid(row.get("pid")),
        node_id=_opt_str(row.get("node_id")),
        name=_opt_str(row.get("name")),
        job_id=_opt_str(row.get("job_id")),
        ray_namespace=_opt_str(row.get("ray_namespace")),
        node_ip=node_ip,
        repr_name=_opt_str(row.get("repr_name")),
        death=_death(row.get("death_cause")),
        placement_group_id=_opt_str(row.get("placement_group_id")),
        raw_state=raw_state,
    )


_EXIT_TYPE = re.compile(r"Worker exit type: ([A-Z_]+)")
_EXIT_DETAIL = re.compile(r"Worker exit detail: (.+?)(?:\. |\.$|$)", re.S)
_MESSAGE_CAP = 600


def _death(cause: Any) -> ActorDeath | None:
    """``death_cause`` is a oneof: ``actor_died_error_context`` (worker died, killed, OOM ...),
    ``creation_task_failure_context``, ``runtime_env_failed_context``,
    ``actor_unschedulable_context``, ``oom_context``; each carries a message."""
    if cause is None or cause == {}:
        return None
    if not isinstance(cause, Mapping):
        raise ParseError("death_cause is not an object")
    for kind, ctx in cause.items():
        if not isinstance(ctx, Mapping):
            continue
        message = _opt_str(ctx.get("error_message")) or _opt_str(
            ctx.get("formatted_exception_string")
        )
        exit_type = exit_detail = None
        if message:
            if m := _EXIT_TYPE.search(message):
                exit_type = m.group(1)
            if m := _EXIT_DETAIL.search(message):
                exit_detail = m.group(1).strip()[:300]
        never = ctx.get("never_started")
        return ActorDeath(
            reason=_opt_str(ctx.get("reason")),
            message=message[:_MESSAGE_CAP] if message else None,
            exit_type=exit_type,
            exit_detail=exit_detail,
            never_started=never if isinstance(never, bool) else None,
            kind=str(kind),
        )
    raise ParseError("death_cause has no context object")


def _task(row: Mapping[str, Any]) -> RayTask:
    name = _opt_str(row.get("name")) or _opt_str(row.get("func_or_class_name")) or ""
    state, raw_state = _state(row.get("state"), _TASK_STATES)
    return RayTask(
        task_id=_req_str(row, "task_id"),
        name=name,
        state=state,
        actor_id=_opt_str(row.get("actor_id")),
        worker_pid=_pid(row.get("worker_pid"), "worker_pid"),
        node_id=_opt_str(row.get("node_id")),
        job_id=_opt_str(row.get("job_id")),
        start_time_ms=_opt_int(row.get("start_time_ms"), "start_time_ms"),
        task_type=_task_type(row.get("type")),
        parent_task_id=_opt_str(row.get("parent_task_id")),
        end_time_ms=_opt_int(row.get("end_time_ms"), "end_time_ms"),
        creation_time_ms=_opt_int(row.get("creation_time_ms"), "creation_time_ms"),
        error_type=_opt_str(row.get("error_type")),
        raw_state=raw_state,
    )


def _placement_group(row: Mapping[str, Any]) -> RayPlacementGroup:
    bundles = row.get("bundles") or []
    if not isinstance(bundles, list):
        raise ParseError("'bundles' is not a list")
    stats = row.get("stats") or {}
    if not isinstance(stats, Mapping):
        raise ParseError("'stats' is not an object")
    state, raw_state = _state(row.get("state"), _PLACEMENT_GROUP_STATES)
    return RayPlacementGroup(
        placement_group_id=_req_str(row, "placement_group_id"),
        state=state,
        name=_opt_str(row.get("name")),
        creator_job_id=_opt_str(row.get("creator_job_id")),
        bundles=tuple(_bundle(b, i) for i, b in enumerate(bundles)),
        scheduling_state=_scheduling_state(stats.get("scheduling_state")),
        scheduling_attempt=_opt_int(stats.get("scheduling_attempt"), "scheduling_attempt"),
        created_ns=_opt_int(
            stats.get("creation_request_received_ns"), "creation_request_received_ns"
        ),
        raw_state=raw_state,
    )


def _bundle(b: Any, i: int) -> PlacementBundle:
    if not isinstance(b, Mapping):
        raise ParseError(f"bundle {i} is not an object")
    bid = b.get("bundle_id")
    index = _opt_int(bid.get("bundle_index"), "bundle_index") if isinstance(bid, Mapping) else None
    return PlacementBundle(
        index=i if index is None else index,
        resources=_resources(b.get("unit_resources"), f"bundle {i}"),
        node_id=_opt_str(b.get("node_id")),
    )


def _resources(value: Any, what: str) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ParseError(f"{what}: resources are not an object")
    out: dict[str, float] = {}
    for key, amount in value.items():
        number = _opt_float(amount, str(key)[:40])
        if number is None or not math.isfinite(number):
            raise ParseError(f"{what}: resource {str(key)[:40]!r} is not a finite number")
        out[str(key)] = number
    return out


def _usage(value: Any, what: str) -> tuple[dict[str, float], dict[str, float]]:
    """``{resource: [used, total]}`` -> (total, used)."""
    if value is None:
        return {}, {}
    if not isinstance(value, Mapping):
        raise ParseError(f"cluster status: {what} is not an object")
    total: dict[str, float] = {}
    used: dict[str, float] = {}
    for key, pair in value.items():
        if not isinstance(pair, list) or len(pair) != 2:
            raise ParseError(f"cluster status: {what}.{str(key)[:40]} is not [used, total]")
        u, t = (_opt_float(x, str(key)[:40]) for x in pair)
        if u is None or t is None or not (math.isfinite(u) and math.isfinite(t)):
            raise ParseError(f"cluster status: {what}.{str(key)[:40]} is not numeric")
        total[str(key)] = t
        used[str(key)] = u
    return total, used


def _list(report: Mapping[str, Any], key: str) -> list[Any]:
    value = report.get(key) or []
    if not isinstance(value, list):
        raise ParseError(f"cluster status: {key} is not a list")
    return value


def _counted(value: Any, what: str) -> tuple[dict[str, float], int]:
    """``[{resource: amount}, count]``."""
    if not isinstance(value, list) or len(value) != 2:
        raise ParseError(f"cluster status: {what} is not [resources, count]")
    count = _opt_int(value[1], "count")
    if count is None or count < 0:
        raise ParseError(f"cluster status: {what} has no count")
    return _resources(value[0], what), count


def _pg_demand(value: Any, i: int) -> PlacementDemand:
    """``[{"bundles": [[{resource: amount}, n], ...], "strategy": "PACK"}, count]``."""
    if not isinstance(value, list) or len(value) != 2 or not isinstance(value[0], Mapping):
        raise ParseError(f"cluster status: pgDemand {i} is not [group, count]")
    group, count = value[0], _opt_int(value[1], "count")
    bundles = group.get("bundles") or []
    if not isinstance(bundles, list):
        raise ParseError(f"cluster status: pgDemand {i} bundles is not a list")
    return PlacementDemand(
        bundles=tuple(_counted(b, f"pgDemand {i} bundle {j}") for j, b in enumerate(bundles)),
        strategy=_opt_str(group.get("strategy")),
        count=count if count is not None and count > 0 else 1,
    )


def _node(row: Mapping[str, Any]) -> RayNode:
    state, raw_state = _state(row.get("state"), _NODE_STATES)
    return RayNode(
        node_id=_req_str(row, "node_id"),
        node_ip=_req_str(row, "node_ip"),
        state=state,
        is_head=row.get("is_head_node") is True,
        hostname=_opt_str(row.get("hostname")),
        raw_state=raw_state,
    )


def _job(row: Mapping[str, Any]) -> RayJob:
    driver = row.get("driver_info")
    if driver is not None and not isinstance(driver, Mapping):
        raise ParseError("driver_info is not an object")
    driver = driver or {}
    if _opt_str(row.get("status")) is None:
        raise ParseError("no 'status'")
    status, raw_status = _state(row.get("status"), _JOB_STATUSES)
    return RayJob(
        job_id=_opt_str(row.get("job_id")),
        submission_id=_opt_str(row.get("submission_id")),
        status=status,
        entrypoint=_opt_str(row.get("entrypoint")),
        driver_pid=_pid(driver.get("pid")),
        driver_node_ip=_opt_str(driver.get("node_ip_address")),
        raw_status=raw_status,
    )


def _summary_gpu(g: Any, node: int, j: int) -> GpuReading:
    if not isinstance(g, Mapping):
        raise ParseError(f"node summary: entry {node} gpu {j} is not an object")
    index = _opt_int(g.get("index"), "index")
    if index is None:
        raise ParseError(f"node summary: entry {node} gpu {j} has no index")
    procs = g.get("processesPids") or []
    if not isinstance(procs, list):
        raise ParseError(f"node summary: gpu {index} has a non-list processesPids")
    processes: list[tuple[int, int | None]] = []
    for p in procs:
        if not isinstance(p, Mapping):
            raise ParseError(f"node summary: gpu {index} has a non-object process entry")
        pid = _pid(p.get("pid"))
        if pid is None:
            continue
        mib = _opt_float(p.get("gpuMemoryUsage"), "gpuMemoryUsage")
        processes.append((pid, int(mib * _MIB) if mib is not None else None))
    power_mw = _opt_float(g.get("powerMw"), "powerMw")
    return GpuReading(
        index=index,
        util_gpu=_opt_int(g.get("utilizationGpu"), "utilizationGpu"),
        util_mem=None,  # Ray's agent does not report memory-controller utilisation
        power_w=power_mw / 1000.0 if power_mw is not None else None,
        processes=tuple(processes),
        uuid=_opt_str(g.get("uuid")),
    )


# --------------------------------------------------------------------------- scalars


def _req_str(row: Mapping[str, Any], key: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value:
        raise ParseError(f"missing or non-string {key!r}")
    return value


def _opt_str(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    raise ParseError(f"expected a string, got {type(value).__name__}")


def _opt_int(value: Any, key: str) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ParseError(f"{key!r} is a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ParseError(f"{key!r} is not finite")
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise ParseError(f"{key!r} is not an integer: {value[:40]!r}") from None
    raise ParseError(f"{key!r} is a {type(value).__name__}, not a number")


def _opt_float(value: Any, key: str) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ParseError(f"{key!r} is not a number")
    try:
        return float(value)
    except (ValueError, OverflowError):
        raise ParseError(f"{key!r} is not a number: {str(value)[:40]!r}") from None


def _pid(value: Any, key: str = "pid") -> int | None:
    """Ray writes pids as ints (state API) or strings (Job API); 0 means "no process yet"."""
    pid = _opt_int(value, key)
    return pid if pid is not None and pid > 0 else None


_GCS_FLAG = re.compile(r"--gcs[-_]address[= ]([A-Za-z0-9_.\-\[\]:]+:\d+)")


def gcs_address_from_summary(body: bytes | str) -> str | None:
    """The GCS address from `/nodes?view=summary` (the raylets' command lines carry `--gcs-address`).

    Lets the doctor reach the GCS (for tasks on other nodes) when it was given only a dashboard URL.
    """
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    found = _GCS_FLAG.search(text)
    return found.group(1) if found else None


# --------------------------------------------------------------------------- the source's table


@dataclass(frozen=True)
class StateEndpoint:
    """One dashboard answer the collector stores, and the parser the loader reads it with."""

    target: str  # the artefact's name (ProbeRecord.target)
    path: str  # meta["endpoint"]
    params: tuple[tuple[str, str], ...] = ()  # the query the collector sends
    parse: Callable[[bytes], tuple[Any, ...]] | None = None  # None: kept verbatim, not analysed
    once: bool = False  # asked at the first sample only (what does not change between samples)


def _task_page(body: bytes) -> tuple[TaskPage]:
    return (parse_task_page(body),)


def _node_summary(body: bytes) -> tuple[GpuSeries | ObjectStoreUsage, ...]:
    return (*parse_node_summary(body), *parse_object_stores(body))


def _cluster(body: bytes) -> tuple[ClusterResources]:
    return (parse_cluster_status(body),)


def filters(*triples: tuple[str, str, str]) -> tuple[tuple[str, str], ...]:
    """State-API filters as query parameters (``filter_keys``/``_predicates``/``_values``)."""
    out: list[tuple[str, str]] = []
    for key, predicate, value in triples:
        out += [("filter_keys", key), ("filter_predicates", predicate), ("filter_values", value)]
    return tuple(out)


# the answer that lists every task still queued or running (actor queues, the wait-for graph)
UNFINISHED_TASKS = "tasks_unfinished"

_ALL_ROWS_DETAILED = (("detail", "1"), ("limit", "10000"))
# Task queries are bounded on Ray's side too: the GCS filters (state, job_id) cut what the
# dashboard reads, `limit` what it sends (Ray sorts by task id before it truncates: a truncated
# page is an arbitrary subset, which the loader reports), `timeout` ends its own GCS call.
TASK_LIMIT = 1000
_TASK_ROWS_DETAILED = (("detail", "1"), ("limit", str(TASK_LIMIT)), ("timeout", "5"))
# The tasks of one job, every state: asked per RUNNING job (target + job id, query + job filter)
# at the second sample by `collect.dashboard.capture_task_history`.
TASK_HISTORY = StateEndpoint("tasks_job_", "/api/v0/tasks", _TASK_ROWS_DETAILED, _task_page)
STATE_ENDPOINTS: tuple[StateEndpoint, ...] = (
    StateEndpoint("version", "/api/version", once=True),
    StateEndpoint("actors", "/api/v0/actors", _ALL_ROWS_DETAILED, parse_actors),
    StateEndpoint(
        "tasks_running",
        "/api/v0/tasks",
        (
            *_ALL_ROWS_DETAILED,
            ("filter_keys", "state"),
            ("filter_predicates", "="),
            ("filter_values", TASK_RUNNING),
        ),
        parse_tasks,
    ),
    # every task still queued or running, in the whole cluster (actor queues, wait-for graph)
    StateEndpoint(
        UNFINISHED_TASKS,
        "/api/v0/tasks",
        (
            *_TASK_ROWS_DETAILED,
            *filters(("state", "!=", TASK_FINISHED), ("state", "!=", TASK_FAILED)),
        ),
        _task_page,
    ),
    StateEndpoint(
        "placement_groups", "/api/v0/placement_groups", _ALL_ROWS_DETAILED, parse_placement_groups
    ),
    StateEndpoint("nodes", "/api/v0/nodes", _ALL_ROWS_DETAILED, parse_nodes),
    StateEndpoint("jobs", "/api/jobs/", parse=parse_jobs),
    StateEndpoint("node_summary", "/nodes", (("view", "summary"),), _node_summary),
    StateEndpoint("cluster_status", "/api/cluster_status", parse=_cluster),
    StateEndpoint("profiling_enabled", "/api/profiling_enabled", once=True),
)


def endpoint_of(path: str, target: str) -> StateEndpoint | None:
    """The table's entry for a stored answer: by its endpoint path (a prefix, as older bundles kept
    the query in it), and by its target where two entries share a path."""
    if target.startswith(TASK_HISTORY.target) and path.startswith(TASK_HISTORY.path):
        return TASK_HISTORY
    matches = [e for e in STATE_ENDPOINTS if path.startswith(e.path)]
    return next((e for e in matches if e.target == target), matches[0] if matches else None)


@dataclass(frozen=True)
class StateAnswer:
    """One dashboard answer, read by its endpoint's parser; `rows` is empty for an answer kept for
    the reader only (the version, whether profiling is on) or one no entry of the table names."""

    target: str  # the record's target (a task history's names its job: tasks_job_<id>)
    endpoint: StateEndpoint | None
    rows: tuple[Any, ...] = ()


def parse_record(data: bytes, rec: ProbeRecord) -> StateAnswer:
    endpoint = endpoint_of(str(rec.meta.get("endpoint") or rec.target), rec.target)
    if endpoint is None or endpoint.parse is None:
        return StateAnswer(rec.target, endpoint)
    return StateAnswer(rec.target, endpoint, endpoint.parse(data))


def _notes(answer: StateAnswer, rec: ProbeRecord) -> tuple[str, ...]:
    """A task list Ray truncated is partly seen: it cuts by task id, so the rows are an arbitrary
    subset."""
    return tuple(
        f"{rec.source} {rec.target}: partly seen: Ray returned {len(page.tasks)} of "
        f"{page.num_filtered} tasks (an arbitrary subset: it truncates by task id)"
        for page in answer.rows
        if isinstance(page, TaskPage) and page.truncated
    )


# --------------------------------------------------------------------------- the joined state


@dataclass(frozen=True)
class TaskPageObs:
    """One answer of the task history / queue queries (every state, parent ids, times)."""

    target: str  # tasks_unfinished | tasks_job_<id>
    sample: int
    time: float  # when it was asked (epoch seconds)
    tasks: tuple[RayTask, ...]
    truncated: bool = False


@dataclass(frozen=True)
class RayState:
    """What the Ray state answers of one bundle say, joined: the newest answer where a later one
    replaces an earlier (the running tasks, the cluster status, the object stores), every answer's
    rows where they add up (actors and nodes by id, jobs, task pages, placement groups)."""

    actors: tuple[RayActor, ...] = ()
    tasks: tuple[RayTask, ...] = ()  # running, by the newest running-task answer
    nodes: tuple[RayNode, ...] = ()
    jobs: tuple[RayJob, ...] = ()
    task_pages: tuple[TaskPageObs, ...] = ()  # by sample and time
    placement_groups: tuple[RayPlacementGroup, ...] = ()
    cluster: ClusterResources | None = None  # the newest /api/cluster_status answer
    object_stores: tuple[ObjectStoreUsage, ...] = ()  # each node's at its fullest reading (_stores)
    summary_gpus: tuple[GpuSeries, ...] = ()  # the node summaries' GPU readings (util and power)
    seen: bool = False  # the actors answer came: the Ray state API answered


class _Joining:
    """The join's running state (mutable, used only while building one RayState)."""

    def __init__(self) -> None:
        self.actors: dict[str, RayActor] = {}
        self.tasks: dict[str, RayTask] = {}
        # task ids of each running-tasks answer, by (sample, time): the newest says what runs
        self.running: dict[tuple[int, float], set[str]] = {}
        self.nodes: dict[str, RayNode] = {}
        self.jobs: list[RayJob] = []
        self.pages: list[TaskPageObs] = []
        self.pgs: dict[str, RayPlacementGroup] = {}
        self.cluster: dict[tuple[int, float], ClusterResources] = {}
        self.stores: dict[tuple[int, float], tuple[ObjectStoreUsage, ...]] = {}
        self.gpus: list[GpuSeries] = []
        self.seen = False


def _actors(j: _Joining, obs: Observed[StateAnswer]) -> None:
    for a in obs.fact.rows:
        j.actors[a.actor_id] = a
    j.seen = True


def _running(j: _Joining, obs: Observed[StateAnswer]) -> None:
    for t in obs.fact.rows:
        j.tasks[t.task_id] = t
    j.running[(obs.sample, obs.at)] = {t.task_id for t in obs.fact.rows}


def _nodes(j: _Joining, obs: Observed[StateAnswer]) -> None:
    for n in obs.fact.rows:
        j.nodes[n.node_id] = n


def _summary(j: _Joining, obs: Observed[StateAnswer]) -> None:
    j.gpus.extend(i for i in obs.fact.rows if isinstance(i, GpuSeries))
    j.stores[(obs.sample, obs.at)] = tuple(
        i for i in obs.fact.rows if isinstance(i, ObjectStoreUsage)
    )


def _jobs(j: _Joining, obs: Observed[StateAnswer]) -> None:
    known = {(job.job_id, job.submission_id) for job in j.jobs}
    j.jobs.extend(job for job in obs.fact.rows if (job.job_id, job.submission_id) not in known)


def _pages(j: _Joining, obs: Observed[StateAnswer]) -> None:
    for page in obs.fact.rows:
        j.pages.append(TaskPageObs(obs.fact.target, obs.sample, obs.at, page.tasks, page.truncated))


def _placement_groups(j: _Joining, obs: Observed[StateAnswer]) -> None:
    for pg in obs.fact.rows:
        j.pgs[pg.placement_group_id] = pg


def _cluster_status(j: _Joining, obs: Observed[StateAnswer]) -> None:
    for cluster in obs.fact.rows:
        j.cluster[(obs.sample, obs.at)] = cluster


# How the join takes each parsed answer, by STATE_ENDPOINTS target (tests/unit/test_source_tables.py:
# every endpoint with a parser has one).
JOINED_BY: dict[str, Callable[[_Joining, Observed[StateAnswer]], None]] = {
    "actors": _actors,
    "tasks_running": _running,
    "nodes": _nodes,
    "node_summary": _summary,
    "jobs": _jobs,
    UNFINISHED_TASKS: _pages,
    TASK_HISTORY.target: _pages,
    "placement_groups": _placement_groups,
    "cluster_status": _cluster_status,
}


def _stores(j: _Joining) -> tuple[ObjectStoreUsage, ...]:
    """Each node's object store at its fullest reading of the run: the node summaries' (up to 15 s
    old: the dashboard's NODE_STATS_UPDATE_INTERVAL_SECONDS) and the cluster statuses' GCS
    resource view (as old as the autoscaler's last state, its ``time``); neither is always the
    fresher, and a store read full that has since made room would have let the waiting task
    start. A GCS reading keeps the newest summary's counters of its node (spill, copies) and is
    named by the nodes answer's address."""
    newest = {s.node_id: s for s in (j.stores[max(j.stores)] if j.stores else ())}
    best: dict[str | None, ObjectStoreUsage] = {}
    readings = [s for key in sorted(j.stores) for s in j.stores[key]]
    for key in sorted(j.cluster):
        for fill in j.cluster[key].stores:
            node = j.nodes.get(fill.node_id or "")
            base = newest.get(fill.node_id) or replace(
                fill, node_ip=node.node_ip if node is not None else None
            )
            readings.append(
                replace(base, used_bytes=fill.used_bytes, available_bytes=fill.available_bytes)
            )
    for r in readings:
        if r.node_id not in best or r.used_fraction > best[r.node_id].used_fraction:
            best[r.node_id] = r
    return tuple(best.values())


def _ray_state(facts: Facts) -> RayState:
    j = _Joining()
    for obs in facts.facts(SPEC):
        endpoint = obs.fact.endpoint
        if endpoint is not None and endpoint.parse is not None:
            JOINED_BY[endpoint.target](j, obs)
    latest = j.running[max(j.running)] if j.running else None
    return RayState(
        actors=tuple(j.actors.values()),
        tasks=tuple(t for t in j.tasks.values() if latest is None or t.task_id in latest),
        nodes=tuple(j.nodes.values()),
        jobs=tuple(j.jobs),
        task_pages=tuple(sorted(j.pages, key=lambda p: (p.sample, p.time))),
        placement_groups=tuple(j.pgs.values()),
        cluster=j.cluster[max(j.cluster)] if j.cluster else None,
        object_stores=_stores(j),
        summary_gpus=tuple(j.gpus),
        seen=j.seen,
    )


# One Ray dashboard answer (collect/dashboard.py MAX_BODY), each read by its endpoint's parser.
SPEC = SourceSpec[StateAnswer](
    name=RAY_DASHBOARD,
    parse=parse_record,
    max_bytes=64 * 1024 * 1024,
    notes=_notes,
    discovery=True,
    analysis="slime_hangdoctor.analysis.parts.ray_state",
)


# The Ray state of the bundle, its answers joined.
RAY_STATE = Join("ray_state", _ray_state)

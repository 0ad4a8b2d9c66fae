"""Observed facts: what the parsers make of raw evidence. Frozen, I/O-free, no verdicts.

Every dataclass here describes something that was *seen* (a stack, a GPU reading, an HTTP answer).
Interpretation lives in `slime_hangdoctor.analysis`; capture lives in `slime_hangdoctor.collect`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final, Literal, get_args

# --------------------------------------------------------------------------- stacks (py-spy)


@dataclass(frozen=True)
class Frame:
    """One stack frame, innermost first in `ThreadStack.frames`."""

    name: str
    filename: str
    line: int | None = None
    short_filename: str = ""
    native: bool = False

    @property
    def where(self) -> str:
        """`function (short/file.py:line)`, as py-spy prints it."""
        loc = self.short_filename or self.filename
        return (
            f"{self.name} ({loc}:{self.line})" if self.line is not None else f"{self.name} ({loc})"
        )


@dataclass(frozen=True)
class ThreadStack:
    thread_id: int
    name: str | None
    active: bool
    owns_gil: bool
    frames: tuple[Frame, ...]
    os_thread_id: int | None = None


@dataclass(frozen=True)
class ProcessStack:
    pid: int
    threads: tuple[ThreadStack, ...]
    title: str | None = None  # "Process N: <title>" line of the text form
    python_version: str | None = None
    native: bool = False


# --------------------------------------------------------------------------- processes (/proc, psutil)

# Proxy variables: `ProcessInfo.env` keeps them in any letter case (Python's urllib, httpx, requests
# and reqwest read http_proxy and HTTP_PROXY alike), their URLs without user or password.
PROXY_ENV: frozenset[str] = frozenset({"http_proxy", "https_proxy", "all_proxy", "no_proxy"})


# psutil's process statuses (psutil.STATUS_*), and "unknown" for one a newer psutil adds
ProcessStatus = Literal[
    "running",
    "sleeping",
    "disk-sleep",
    "stopped",
    "tracing-stop",
    "zombie",
    "dead",
    "wake-kill",
    "waking",
    "idle",
    "locked",
    "waiting",
    "suspended",
    "parked",
    "unknown",
]
PROCESS_STATUSES: Final[frozenset[str]] = frozenset(get_args(ProcessStatus))
STATUS_ZOMBIE: Final[ProcessStatus] = "zombie"
STATUS_RUNNING: Final[ProcessStatus] = "running"  # state R: running, or waiting only for a CPU
STATUS_DISK_SLEEP: Final[ProcessStatus] = "disk-sleep"
STATUS_UNKNOWN: Final[ProcessStatus] = "unknown"
# gone from the process table's point of view: a zombie waiting to be reaped, or dead
STATUS_GONE: Final[frozenset[ProcessStatus]] = frozenset({"zombie", "dead"})


@dataclass(frozen=True)
class ProcessInfo:
    """One process as psutil / procfs saw it at one sample."""

    pid: int
    ppid: int | None
    name: str
    cmdline: tuple[str, ...]  # already redacted
    status: ProcessStatus
    cpu_seconds: float | None  # user + system, cumulative
    create_time: float | None = None
    num_threads: int | None = None
    listen_ports: tuple[int, ...] = ()
    listen_addrs: tuple[str, ...] = ()  # "ip:port" of TCP listening sockets
    env: Mapping[str, str] = field(default_factory=dict)  # allow-listed, non-secret keys only
    node_ip: str | None = None

    @property
    def title(self) -> str:
        """The process title (Ray and SGLang put their role in argv[0])."""
        return " ".join(a for a in self.cmdline if a).strip() or self.name


# --------------------------------------------------------------------------- GPUs (NVML, GPM)


@dataclass(frozen=True)
class GpuProcessUtil:
    pid: int
    sm_util: int
    mem_util: int


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one instant. None where NVML did not answer that field."""

    index: int
    util_gpu: int | None
    util_mem: int | None
    power_w: float | None = None
    sm_mhz: int | None = None
    pcie_tx_kbs: int | None = None
    pcie_rx_kbs: int | None = None
    nvlink_tx: int | None = None  # cumulative counter (NVML field value)
    nvlink_rx: int | None = None
    processes: tuple[tuple[int, int | None], ...] = ()  # (pid, used memory bytes)
    process_util: tuple[GpuProcessUtil, ...] = ()
    uuid: str | None = None


@dataclass(frozen=True)
class GpuSample:
    t: float  # seconds since the first sample of the series
    gpus: tuple[GpuReading, ...]


@dataclass(frozen=True)
class GpuSeries:
    """A short time series of every GPU on one node."""

    samples: tuple[GpuSample, ...]
    driver: str | None = None
    node_ip: str | None = None


@dataclass(frozen=True)
class GpmReading:
    """Hopper+ GPM metrics of one GPU over a short interval (percent, or bytes/s for NVLINK)."""

    index: int
    supported: bool
    metrics: Mapping[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------- NCCL RAS


@dataclass(frozen=True)
class RasRank:
    rank: int
    pid: int | None = None
    host: str | None = None
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    collective_counts: Mapping[str, int] = field(default_factory=dict)
    missing: bool = False  # listed under missing_ranks
    considered_dead: bool | None = None
    launched_up_to: int | None = None  # text form: "has launched up to operation N"


@dataclass(frozen=True)
class RasCommunicator:
    hash: str
    size: int | None
    ranks: tuple[RasRank, ...]
    status: str | None = None  # as RAS printed it: RUNNING, INIT, ABORT ... (text form)
    errors: str | None = None  # as RAS printed it: OK, MISMATCH, INCOMPLETE, ERROR ...
    messages: tuple[str, ...] = ()  # the warning lines RAS printed for this communicator

    @property
    def states(self) -> frozenset[RasState]:
        """The states RAS printed, typed (a word it prints that NCCL 2.28 does not is UNKNOWN);
        none printed: RUNNING."""
        return _ras_words(self.status, RAS_STATES) or frozenset({RAS_RUNNING})

    @property
    def error_kinds(self) -> frozenset[RasError]:
        """The errors RAS printed, typed (OK: none; an unknown word is UNKNOWN)."""
        return _ras_words(self.errors, RAS_ERRORS) - {"OK"}


# NCCL RAS's words for a communicator (NCCL 2.28 src/ras/client_support.cc: rasACStatus,
# rasACError), as its text form prints them, comma-separated where several hold
RasState = Literal["NOCOMM", "INIT", "RUNNING", "FINALIZE", "ABORT", "UNKNOWN"]
RasError = Literal["OK", "MISMATCH", "ERROR", "INCOMPLETE", "UNKNOWN"]
RAS_STATES: Final[frozenset[str]] = frozenset(get_args(RasState))
RAS_ERRORS: Final[frozenset[str]] = frozenset(get_args(RasError))
RAS_RUNNING: Final[RasState] = "RUNNING"
RAS_MISMATCH: Final[RasError] = "MISMATCH"
# states of a communicator that works or is being set up
RAS_HEALTHY: Final[tuple[frozenset[RasState], ...]] = (frozenset({"RUNNING"}), frozenset({"INIT"}))


def _ras_words(text: str | None, known: frozenset[str]) -> frozenset[Any]:
    words = {w.strip().upper() for w in (text or "").replace(" ", ",").split(",") if w.strip()}
    return frozenset(w if w in known else "UNKNOWN" for w in words)


@dataclass(frozen=True)
class RasReport:
    communicators: tuple[RasCommunicator, ...]
    nccl_version: str | None = None
    source_format: str = "json"  # json | text
    repaired: bool = False  # NCCL 2.28.9's malformed JSON was repaired


# --------------------------------------------------------------------------- PyTorch flight recorder


# a flight-recorder entry's state (torch/csrc/distributed/c10d/FlightRecorder: scheduled, started,
# completed)
FrState = Literal["scheduled", "started", "completed", "unknown"]
FR_STATES: Final[frozenset[str]] = frozenset(get_args(FrState))
FR_COMPLETED: Final[FrState] = "completed"


@dataclass(frozen=True)
class FrEntry:
    record_id: int
    # The process's own count of the groups it created (ProcessGroupNCCL/Gloo uid): differs across
    # ranks for one group as soon as they created different groups. `FrDump.pg_status` is keyed by it.
    pg_id: int | None
    collective_seq_id: int
    op: str  # profiling_name, e.g. "nccl:broadcast"
    state: FrState
    frames: tuple[Frame, ...]
    is_p2p: bool = False
    input_sizes: tuple[tuple[int, ...], ...] = ()
    # `process_group: (pg_name, desc)`: the group's name, the same on every rank of the group
    # (new_group's counter, or a hash of its ranks), and the user's description ("default_pg",
    # Megatron's "DATA_PARALLEL_GROUP"; "undefined" when none). None: a dump without the field.
    pg_name: str | None = None
    pg_desc: str | None = None


@dataclass(frozen=True)
class FrDump:
    rank: int
    version: str
    entries: tuple[FrEntry, ...]
    pg_status: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # by str(pg_id)
    pg_config: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # by pg_name
    pid: int | None = None


# --------------------------------------------------------------------------- Ray state

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


@dataclass(frozen=True)
class ObjectStoreUsage:
    """One node's plasma object store as its raylet reports it (``/nodes?view=summary``:
    ``raylet.objectStoreUsedMemory``, ``raylet.objectStoreAvailableMemory`` and the
    ``raylet.storeStats`` counters, which Ray leaves out where they are zero)."""

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


# --------------------------------------------------------------------------- logs (Ray log API)


class LogKind(str, Enum):
    """What a notable log line says."""

    TRACEBACK = "traceback"  # "Traceback (most recent call last):" with its exception line
    ERROR = "error"  # an ERROR / Exception / FATAL line
    OOM = "oom"  # CUDA or host out of memory, OOM killer
    TIMEOUT = "timeout"  # TimeoutError, "timed out", NCCL watchdog timeouts
    RETRY = "retry"  # slime's HTTP retry lines ("retrying... (attempt k/60, url=...)")
    CACHE_NOT_FLUSHED = "cache_not_flushed"  # SGLang: flush refused while requests are pending


@dataclass(frozen=True)
class LogLine:
    """One notable line of a log tail (text cut to a few hundred characters)."""

    kind: LogKind
    text: str
    time: float | None = None  # epoch seconds, when the line carries a time


@dataclass(frozen=True)
class LogTimer:
    """A slime `Timer <name> start` line with no matching `end` after it in the tail."""

    name: str
    started: float | None
    text: str


@dataclass(frozen=True)
class LogTail:
    """What one log tail shows."""

    lines: int  # non-empty lines read
    last_time: float | None  # time of the newest line that carries one
    last_line: str  # the newest non-empty line (cut)
    notable: tuple[LogLine, ...] = ()  # oldest first, the last few of each kind
    open_timers: tuple[LogTimer, ...] = ()  # oldest first
    # SGLang's last "Cache not flushed ... #queue-req: N, #running-req: M": (N, M)
    pending_flush: tuple[int, int] | None = None


# --------------------------------------------------------------------------- TCP connections (procfs)


# the kernel's TCP state names (include/net/tcp_states.h), UNKNOWN for a number it adds
TcpState = Literal[
    "ESTABLISHED",
    "SYN_SENT",
    "SYN_RECV",
    "FIN_WAIT1",
    "FIN_WAIT2",
    "TIME_WAIT",
    "CLOSE",
    "CLOSE_WAIT",
    "LAST_ACK",
    "LISTEN",
    "CLOSING",
    "NEW_SYN_RECV",
    "UNKNOWN",
]
TCP_LISTEN: Final[TcpState] = "LISTEN"
TCP_ESTABLISHED: Final[TcpState] = "ESTABLISHED"
# a request in flight, or a connect that never completes
TCP_WAITING: Final[frozenset[TcpState]] = frozenset({"ESTABLISHED", "SYN_SENT"})


@dataclass(frozen=True)
class TcpSocket:
    """One row of the kernel's /proc/net/tcp or tcp6 table."""

    local_ip: str
    local_port: int
    remote_ip: str
    remote_port: int
    state: TcpState
    tx_queue: int  # bytes sent and not yet acknowledged by the peer
    rx_queue: int  # bytes received and not yet read by the process
    inode: int


@dataclass(frozen=True)
class TcpConnection:
    """A TCP socket held by one process (socket inode matched to one of its fds)."""

    pid: int
    fd: int
    socket: TcpSocket
    node_ip: str | None = None

    @property
    def remote(self) -> str:
        ip = self.socket.remote_ip
        return (
            f"[{ip}]:{self.socket.remote_port}" if ":" in ip else f"{ip}:{self.socket.remote_port}"
        )


# --------------------------------------------------------------------------- kernel-side process state


@dataclass(frozen=True)
class IoCounters:
    """/proc/<pid>/io: cumulative bytes (read_bytes/write_bytes reach the storage layer)."""

    rchar: int
    wchar: int
    read_bytes: int
    write_bytes: int


# the state letter of /proc/<pid>/stat (fs/proc/array.c task_state_array; "?" for one it adds)
TaskLetter = Literal["R", "S", "D", "T", "t", "X", "x", "Z", "P", "I", "K", "W", "?"]
TASK_LETTERS: Final[frozenset[str]] = frozenset(get_args(TaskLetter))
DISK_SLEEP: Final[TaskLetter] = "D"  # uninterruptible sleep
TRACED: Final[TaskLetter] = "t"  # tracing stop (py-spy holds it)


@dataclass(frozen=True)
class ThreadKernelState:
    tid: int
    name: str
    state: TaskLetter  # of /proc/<pid>/task/<tid>/stat
    wchan: str | None = None


@dataclass(frozen=True)
class SchedStat:
    """/proc/<pid>/schedstat: the main thread's nanoseconds on a CPU and waiting on a run queue."""

    run_ns: int
    wait_ns: int


@dataclass(frozen=True)
class ProcessKernelState:
    """What the kernel says one process is doing: its state, where it sleeps, its I/O so far."""

    pid: int
    state: TaskLetter  # of /proc/<pid>/stat
    wchan: str | None = None  # kernel function it sleeps in ("0" / empty: running or not shown)
    io: IoCounters | None = None  # None: not readable (another user's process without root)
    blocked_threads: tuple[ThreadKernelState, ...] = ()  # threads in D state (disk sleep)
    sched: SchedStat | None = None  # None: not read (an older bundle, a kernel without it)

    @property
    def in_disk_sleep(self) -> bool:
        return self.state == DISK_SLEEP or bool(self.blocked_threads)


@dataclass(frozen=True)
class ShmSpace:
    path: str
    total_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class KernelLogLine:
    text: str
    age_s: float | None = None  # seconds before the sample, from the record's timestamp


@dataclass(frozen=True)
class KernelLog:
    """OOM-killer lines of the kernel log, where it could be read."""

    readable: bool
    why_not: str | None = None
    oom_lines: tuple[KernelLogLine, ...] = ()


@dataclass(frozen=True)
class NodeKernel:
    """One node's kernel-side view at one sample."""

    processes: tuple[ProcessKernelState, ...]
    shm: ShmSpace | None = None
    shm_error: str | None = None
    log: KernelLog | None = None


# --------------------------------------------------------------------------- actor log heads (node files)


@dataclass(frozen=True)
class LoggedUrl:
    """An engine URL one of its start-up lines names."""

    url: str  # scheme://host:port, as logged (the host is not resolved)
    line: str  # the line (cut)
    served: bool  # SGLang's uvicorn line (the server listened there); False: slime's launch line


@dataclass(frozen=True)
class ActorLogHead:
    """What the first bytes of a slime actor's worker log say: engine URLs, and the routers a
    RolloutManager launched."""

    urls: tuple[LoggedUrl, ...] = ()
    lines: int = 0  # whole lines read
    # which log: the actor's pid and class, the stream (err / out) and the log's file name
    pid: int = 0
    class_name: str = ""
    stream: str = ""
    file: str | None = None
    # slime's `Router launched at HOST:PORT` lines, oldest first (`served` is False: a launch, not
    # a listening socket)
    routers: tuple[LoggedUrl, ...] = ()

    @property
    def served_url(self) -> LoggedUrl | None:
        """The URL the server last said it listens on (None: no uvicorn line in the head)."""
        served = [u for u in self.urls if u.served]
        return served[-1] if served else None

"""Ray object store (source ``ray_plasma``): a task of the running job that cannot start because
the object store has no room for its arguments (ray-project/ray#62093).

Ray's raylet grants a task's lease only while the arguments that running tasks pin in the object
store stay under ``max_task_args_memory_fraction`` (0.7) of the store; pinned arguments of granted
leases are neither evicted nor spilled. A task whose lease waits for that room shows in the state
API as still waiting for its node (Ray 2.60: ``PENDING_NODE_ASSIGNMENT``; the task-event states
``PENDING_OBJ_STORE_MEM_AVAIL`` and ``PENDING_ARGS_FETCH`` name the same wait where Ray reports
them), while the node's raylet reports a store filled past that fraction (``/nodes?view=summary``)
and the autoscaler's report lists no task demand that the free resources do not cover
(``resourceDemand`` lists the task that waits for plasma memory too, with a demand that fits).
Together, over both samples, they make the claim; the task's caller chain (``parent_task_id``) up
to a slime actor names the call that waits and its stage.

Pure: `suspects(reads)` for the registry, `findings(world)` for the report.
"""

from __future__ import annotations

from dataclasses import dataclass

from slime_hangdoctor.analysis.signatures import method_stage
from slime_hangdoctor.analysis.source_analysis import (
    STRONG,
    Reads,
    Source,
    SourceAnalysis,
    Suspect,
    suspect,
)
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.parsers.ray_state import (
    DRIVER_TASK,
    JOB_RUNNING,
    RAY_STATE,
    TASK_RUNNING,
    UNFINISHED_TASKS,
    ClusterResources,
    ObjectStoreUsage,
    RayActor,
    RayTask,
    RayTaskType,
    TaskState,
)
from slime_hangdoctor.topology import CLASS_ROLES
from slime_hangdoctor.verdict import Finding, Role, Severity, Stage

# a task whose arguments do not fit in the object store (the raylets' stores)
RAY_PLASMA = Source("ray_plasma")

# Ray 2.60's task states (common.proto TaskStatus) in which a task waits for its lease or for its
# arguments to fit in the object store
LEASE_WAIT_STATES: frozenset[TaskState] = frozenset(
    ("PENDING_NODE_ASSIGNMENT", "PENDING_OBJ_STORE_MEM_AVAIL", "PENDING_ARGS_FETCH")
)
# task types that ask the raylet for a lease (an actor's method runs in its leased worker)
LEASE_TASK_TYPES: frozenset[RayTaskType] = frozenset(("NORMAL_TASK", "ACTOR_CREATION_TASK"))
# Ray's `max_task_args_memory_fraction` (ray_config_def.h; RAY_max_task_args_memory_fraction)
ARGS_MEMORY_FRACTION = 0.7

NEXT_STEPS = (
    "`ray memory --stats-only` (and `ray memory --group-by STACK_TRACE`): what fills the store, "
    "pinned by whom",
    "`ray status -v`: object_store_memory used against its total, per node",
    "give the store room (`ray start --object-store-memory`), or pass large data inside a "
    "container (Ray does not pin an ObjectRef nested in a list or dict as a task argument) so that "
    "waiting tasks do not pin it; spilling (`object_spilling_config`) does not free arguments of "
    "running tasks",
)


@dataclass(frozen=True)
class PlasmaWait:
    task: RayTask  # the task that cannot start
    stores: tuple[ObjectStoreUsage, ...]  # the nodes' stores past the argument limit
    holders: tuple[RayTask, ...]  # running tasks of the job that hold leases (and their arguments)
    caller: RayTask | None  # the nearest caller up the chain that a slime actor or the driver runs
    actor: RayActor | None  # that caller's actor
    role: Role | None


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.0f} MiB"


def store_text(s: ObjectStoreUsage) -> str:
    parts = [f"{_mib(s.used_bytes)} of {_mib(s.capacity_bytes)} used ({s.used_fraction:.0%})"]
    parts.append(f"{_mib(s.primary_copy_bytes)} primary copies")
    if s.spilled_bytes:
        parts.append(f"{_mib(s.spilled_bytes)} spilled")
    if s.pulls_queued:
        parts.append("pulls queued")
    return f"object store of node {s.node_ip or (s.node_id or '?')[:12]}: " + ", ".join(parts)


def _waiting_ids(world: World) -> set[str] | None:
    """Task ids in a lease-wait state in every answer of the unfinished-task query (None: the
    query was never answered)."""
    pages = [p for p in world.snapshot.joined(RAY_STATE).task_pages if p.target == UNFINISHED_TASKS]
    if not pages:
        return None
    sets = [
        {
            t.task_id
            for t in p.tasks
            if t.state in LEASE_WAIT_STATES and t.task_type in LEASE_TASK_TYPES
        }
        for p in pages
    ]
    return set.intersection(*sets)


def _caller(
    task: RayTask, tasks: dict[str, RayTask], actors: dict[str, RayActor]
) -> tuple[RayTask | None, RayActor | None, Role | None]:
    seen: set[str] = set()
    cur = tasks.get(task.parent_task_id or "")
    while cur is not None and cur.task_id not in seen:
        seen.add(cur.task_id)
        if cur.task_type == DRIVER_TASK:
            return cur, None, Role.DRIVER
        actor = actors.get(cur.actor_id or "")
        role = CLASS_ROLES.get(actor.class_name) if actor is not None else None
        if actor is not None and role is not None:
            return cur, actor, role
        cur = tasks.get(cur.parent_task_id or "")
    return None, None, None


def _resources_short(cluster: ClusterResources | None) -> bool:
    """Whether a task waiting for a lease may wait for resources instead: the autoscaler's report
    (``resourceDemand``, which lists a task waiting for plasma memory too) holds a demand that the
    cluster's free resources do not cover."""
    if cluster is None:
        return False
    for shape, _count in cluster.task_demands:
        for key, need in shape.items():
            free = cluster.total.get(key, 0.0) - cluster.used.get(key, 0.0)
            if need > free + 1e-9:
                return True
    return False


def plasma_waits(world: World) -> list[PlasmaWait]:
    snap = world.snapshot
    full = tuple(
        s for s in snap.joined(RAY_STATE).object_stores if s.used_fraction >= ARGS_MEMORY_FRACTION
    )
    waiting = _waiting_ids(world)
    if not full or not waiting:
        return []
    if _resources_short(snap.joined(RAY_STATE).cluster):
        return []
    jobs = {j.job_id for j in snap.joined(RAY_STATE).jobs if j.status == JOB_RUNNING and j.job_id}
    tasks: dict[str, RayTask] = {}
    for page in snap.joined(
        RAY_STATE
    ).task_pages:  # oldest first: the newest answer about a task wins
        tasks.update((t.task_id, t) for t in page.tasks)
    actors = {a.actor_id: a for a in snap.joined(RAY_STATE).actors}
    out: list[PlasmaWait] = []
    for task_id in sorted(waiting):
        task = tasks[task_id]
        if jobs and task.job_id not in jobs:
            continue
        holders = tuple(
            t
            for t in tasks.values()
            if t.state == TASK_RUNNING
            and t.task_type in LEASE_TASK_TYPES
            and t.job_id == task.job_id
            and (task.node_id is None or t.node_id in (None, task.node_id))
        )
        caller, actor, role = _caller(task, tasks, actors)
        out.append(PlasmaWait(task, full, holders, caller, actor, role))
    return out


def _proc(world: World, w: PlasmaWait) -> Proc | None:
    if w.role is Role.DRIVER:
        drivers = world.by_role(Role.DRIVER)
        return drivers[0] if drivers else None
    for p in world.procs:
        if w.actor is not None and (
            p.actor_id == w.actor.actor_id or (w.actor.pid is not None and p.pid == w.actor.pid)
        ):
            return p
    return None


def _stage(w: PlasmaWait) -> Stage | None:
    if w.actor is None or w.caller is None:
        return None
    sig = method_stage(w.actor.class_name, w.caller.method)
    return sig.stage if sig is not None else None


def wait_text(w: PlasmaWait) -> str:
    who = (
        f"{w.actor.class_name}.{w.caller.method}"
        if w.actor is not None and w.caller is not None
        else "the driver"
        if w.role is Role.DRIVER
        else "its caller"
    )
    held = (
        f"; {len(w.holders)} running task(s) of the job hold their arguments pinned "
        f"({', '.join(sorted({t.name for t in w.holders})[:3])})"
        if w.holders
        else ""
    )
    return (
        f"Ray object store: task {w.task.name} ({w.task.task_id[:12]}) is {w.task.state} over both "
        f"samples while the {store_text(w.stores[0])}, past Ray's {ARGS_MEMORY_FRACTION:.0%} "
        f"limit for the arguments of running tasks (WAITING_FOR_AVAILABLE_PLASMA_MEMORY){held}: "
        f"it cannot start, and {who} waits for it"
    )


def suspects(reads: Reads) -> list[Suspect]:
    world = reads.world
    out: list[Suspect] = []
    for w in plasma_waits(world):
        if w.role is None:
            continue
        proc = _proc(world, w)
        out.append(
            suspect(
                RAY_PLASMA,
                w.role,
                wait_text(w),
                proc,
                actor_id=w.actor.actor_id if w.actor is not None else None,
                pid=w.actor.pid if w.actor is not None else None,
                weight=STRONG,
                stage=_stage(w),
                evidence=(*(store_text(s) for s in w.stores), *NEXT_STEPS),
            )
        )
    return out


def findings(world: World) -> list[Finding]:
    return [
        Finding(
            "ray_plasma.args_wait",
            Severity.CRITICAL,
            wait_text(w),
            (
                *(store_text(s) for s in w.stores),
                *(f"{t.name} {t.task_id[:12]} RUNNING: holds its lease" for t in w.holders[:5]),
                *(f"next: {step}" for step in NEXT_STEPS),
            ),
        )
        for w in plasma_waits(world)
    ]


ANALYSIS = SourceAnalysis(
    name="plasma",
    gives=(RAY_PLASMA,),
    suspects=suspects,
    findings=lambda r: findings(r.world),
)

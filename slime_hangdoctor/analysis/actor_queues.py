"""Ray task history and queues per actor: who runs what, what waits behind it, who waits on whom.

Pure: reads the task pages of a `Snapshot` (``/api/v0/tasks`` answers with every state, parent task
ids and times). Each actor runs its methods one at a time (slime's actors are plain, not async), so
a call queued on an actor waits for the method it runs now. From that and the parent task ids:

- a **wait-for edge** A -> B when a task of actor A waits on a call queued on actor B behind B's
  running method: either A's running method made the call (its child), or the call and A's running
  method were fanned out by the same caller (siblings: calls that meet in one process group, as
  engines joining a weight-update group do);
- a **cycle** of such edges that held in both samples is a deadlock of the actors' queues
  (slime PR#2331: engines joining PP groups in opposite orders; open-instruct PR#1454);
- an **engine left paused**: its last ``pause_generation`` finished and no ``continue_generation``
  came after it (AReaL#1160). While the weight update that paused it is in flight, that is the
  normal middle of an update, not an engine left paused: the call that paused it still runs (a
  train rank's ``update_weights``: `PausedEngine.update`), or that caller's calls of the update
  made after the pause have not ended on some engine (slime main's disk path, where the driver
  pauses, flushes and reloads each engine: `PausedEngine.in_flight`);
- a **method running far longer than its earlier runs** (verl#1696: one actor method stuck).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from slime_hangdoctor.analysis.signatures import method_stage
from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.facts import (
    ACTOR_ALIVE,
    ACTOR_CREATION_TASK,
    TASK_ENDED,
    TASK_FINISHED,
    TASK_RUNNING_ANY,
    RayActor,
    RayTask,
)
from slime_hangdoctor.parsers.ray_state import UNFINISHED_TASKS
from slime_hangdoctor.snapshot import Snapshot, TaskPageObs
from slime_hangdoctor.verdict import Stage

RAY_TASKS = Source(
    "ray_tasks"
)  # Ray's task list: actor queues, wait-for cycles, paused engines, overlong methods

# a task that runs now or has ended: it reached a worker, it is not queued
_STARTED = TASK_RUNNING_ANY | TASK_ENDED
_ACTOR_CREATION_PREFIX = "f" * 16  # actor creation task id = 16 x "f" + actor id

PAUSE_METHOD = "pause_generation"
CONTINUE_METHOD = "continue_generation"
OVERLONG_FACTOR = 5.0  # a run this many times the longest earlier run ...
OVERLONG_MIN_EXTRA_S = 5.0  # ... and at least this much longer than it
OVERLONG_MIN_RUNS = 2  # earlier finished runs needed to compare with
RECENT = 5  # finished tasks kept per actor
_UPDATE_STAGES = frozenset({Stage.WEIGHT_SYNC, Stage.NCCL_BROADCAST})


@dataclass(frozen=True)
class ActorQueue:
    actor: RayActor
    running: tuple[RayTask, ...]
    queued: tuple[RayTask, ...]  # oldest first
    recent: tuple[RayTask, ...]  # finished or failed, newest first


@dataclass(frozen=True)
class WaitEdge:
    """Actor `waiter` cannot go on until actor `holder` runs `queued`, which waits behind
    `holding` (the method `holder` runs now)."""

    waiter: str  # actor id
    holder: str  # actor id
    waiting: RayTask | None  # the waiter's running task that waits (None: an async caller)
    queued: RayTask
    holding: RayTask
    # child: made by the waiting actor's running method; sibling: fanned out by the same caller
    kind: Literal["child", "sibling"]


@dataclass(frozen=True)
class CallEdge:
    """Actor `caller`'s running method `waiting` made the call `called`, which runs now on actor
    `callee`: the caller waits on it while it blocks in `ray.get` / `ray.wait` on it (its stack
    says whether it does; Ray 2.60's task list says RUNNING either way)."""

    caller: str  # actor id
    callee: str  # actor id
    waiting: RayTask
    called: RayTask


@dataclass(frozen=True)
class PausedEngine:
    actor: RayActor
    pause: RayTask
    continue_queued: RayTask | None = None  # a continue_generation that never ran (queued)
    # the call that paused it (the pause's caller), still running: an update in flight, whose
    # continue_generation has not come yet (normal); None: that caller has ended or is unknown
    update: RayTask | None = None
    # the weight update's own calls that the same caller made after the pause and that have not
    # ended, on any engine (slime main's disk path pauses from the driver, whose task runs for the
    # whole job: its update_weights_from_disk still running on another engine is the update)
    in_flight: tuple[RayTask, ...] = ()

    @property
    def left_paused(self) -> bool:
        """Paused with nothing still running that would continue it."""
        return self.update is None and not self.in_flight


@dataclass(frozen=True)
class OverlongTask:
    actor: RayActor
    task: RayTask
    elapsed_s: float
    longest_earlier_s: float
    earlier_runs: int


@dataclass(frozen=True)
class TaskView:
    queues: tuple[ActorQueue, ...]
    edges: tuple[WaitEdge, ...]
    cycles: tuple[tuple[WaitEdge, ...], ...]  # each held in both samples
    paused: tuple[PausedEngine, ...]
    overlong: tuple[OverlongTask, ...]
    history_seen: bool  # a history page answered (needed for paused/overlong)
    history_partial: bool  # a page was truncated by Ray: absences are not evidence
    calls: tuple[CallEdge, ...] = ()  # running calls between actors
    persistent: frozenset[str] | None = None  # task ids unfinished in both samples (None: one)

    def held(self, edge: WaitEdge | CallEdge) -> bool:
        """Whether the edge's tasks were all unfinished in both samples."""
        if self.persistent is None:
            return False
        if isinstance(edge, CallEdge):
            tasks = [edge.waiting, edge.called]
        else:
            tasks = [edge.queued, edge.holding] + ([edge.waiting] if edge.waiting else [])
        return all(t.task_id in self.persistent for t in tasks)

    def queue_of(self, actor_id: str) -> ActorQueue | None:
        return next((q for q in self.queues if q.actor.actor_id == actor_id), None)


def _merged(pages: tuple[TaskPageObs, ...]) -> dict[str, RayTask]:
    """Every task seen, in the state of the newest page that had it."""
    out: dict[str, RayTask] = {}
    for page in sorted(pages, key=lambda p: (p.sample, p.time)):
        for t in page.tasks:
            out[t.task_id] = t
    return out


def _current(pages: tuple[TaskPageObs, ...]) -> TaskPageObs | None:
    """The newest page of the unfinished query (complete for queued and running tasks)."""
    unfinished = [p for p in pages if p.target == UNFINISHED_TASKS]
    return max(unfinished, key=lambda p: (p.sample, p.time)) if unfinished else None


def _sort_key(t: RayTask) -> int:
    return t.start_time_ms or t.creation_time_ms or 0


def _actor_of(task_id: str | None, tasks: dict[str, RayTask], actors: set[str]) -> str | None:
    if not task_id:
        return None
    parent = tasks.get(task_id)
    if parent is not None and parent.actor_id:
        return parent.actor_id
    if task_id.startswith(_ACTOR_CREATION_PREFIX) and task_id[16:] in actors:
        return task_id[16:]
    return None


def build_view(snapshot: Snapshot) -> TaskView | None:
    """The actors' queues and what follows from them; None when no task page answered."""
    pages = snapshot.task_pages
    if not pages:
        return None
    actors = {a.actor_id: a for a in snapshot.actors}
    known = _merged(pages)
    current = _current(pages)
    now_tasks = {t.task_id: t for t in current.tasks} if current else {}
    # A task the unfinished query no longer lists has ended (its end may be in the history).
    state = {
        tid: (now_tasks.get(tid, t))
        for tid, t in known.items()
        if tid in now_tasks or t.state in TASK_ENDED or current is None
    }
    queues = _queues(actors, state)
    edges = _edges(now_tasks, known, set(actors))
    persistent = _persistent_ids(pages)
    cycles = tuple(c for c in _cycles(edges) if all(_held(e, persistent) for e in c))
    history = [p for p in pages if p.target != UNFINISHED_TASKS]
    partial = any(p.truncated for p in pages)
    now_ms = current.time * 1000.0 if current else None
    paused = _paused(actors, state) if history and not partial else ()
    overlong = _overlong(actors, state, now_ms) if history and now_ms else ()
    calls = _calls(now_tasks, known)
    held = frozenset(persistent) if persistent is not None else None
    return TaskView(queues, edges, cycles, paused, overlong, bool(history), partial, calls, held)


def _queues(actors: dict[str, RayActor], state: dict[str, RayTask]) -> tuple[ActorQueue, ...]:
    by_actor: dict[str, list[RayTask]] = {}
    for t in state.values():
        if t.actor_id and t.task_type != ACTOR_CREATION_TASK:
            by_actor.setdefault(t.actor_id, []).append(t)
    out: list[ActorQueue] = []
    for actor_id, tasks in by_actor.items():
        actor = actors.get(actor_id)
        if actor is None:
            continue
        running = tuple(sorted((t for t in tasks if t.state in TASK_RUNNING_ANY), key=_sort_key))
        queued = tuple(sorted((t for t in tasks if t.state not in _STARTED), key=_sort_key))
        done = [t for t in tasks if t.state in TASK_ENDED]
        recent = tuple(sorted(done, key=lambda t: -(t.end_time_ms or 0))[:RECENT])
        out.append(ActorQueue(actor, running, queued, recent))
    return tuple(sorted(out, key=lambda q: (q.actor.class_name, q.actor.actor_id)))


def _edges(
    now: dict[str, RayTask], known: dict[str, RayTask], actors: set[str]
) -> tuple[WaitEdge, ...]:
    running_on: dict[str, list[RayTask]] = {}
    for t in now.values():
        if t.state in TASK_RUNNING_ANY and t.actor_id:
            running_on.setdefault(t.actor_id, []).append(t)
    by_parent: dict[str, list[RayTask]] = {}
    for t in now.values():
        if t.parent_task_id:
            by_parent.setdefault(t.parent_task_id, []).append(t)
    out: dict[tuple[str, str, str], WaitEdge] = {}
    for q in now.values():
        if q.state in TASK_RUNNING_ANY or not q.actor_id or q.actor_id not in running_on:
            continue
        holding = min(running_on[q.actor_id], key=_sort_key)
        # the caller itself, when it is an actor's running method (or an async actor)
        parent = known.get(q.parent_task_id or "")
        caller = _actor_of(q.parent_task_id, known, actors)
        if caller and caller != q.actor_id:
            waiting = parent if parent is not None and parent.state in TASK_RUNNING_ANY else None
            if waiting is not None or caller in running_on:
                out.setdefault(
                    (caller, q.actor_id, q.task_id),
                    WaitEdge(caller, q.actor_id, waiting, q, holding, "child"),
                )
        # siblings: calls of the same caller running on other actors
        for s in by_parent.get(q.parent_task_id or "", []):
            if s.state in TASK_RUNNING_ANY and s.actor_id and s.actor_id != q.actor_id:
                out.setdefault(
                    (s.actor_id, q.actor_id, q.task_id),
                    WaitEdge(s.actor_id, q.actor_id, s, q, holding, "sibling"),
                )
    return tuple(out.values())


def _calls(now: dict[str, RayTask], known: dict[str, RayTask]) -> tuple[CallEdge, ...]:
    """Calls that run on one actor, made by the running method of another."""
    out: list[CallEdge] = []
    for t in now.values():
        if t.state not in TASK_RUNNING_ANY or not t.actor_id or not t.parent_task_id:
            continue
        parent = now.get(t.parent_task_id) or known.get(t.parent_task_id)
        if parent is None or parent.state not in TASK_RUNNING_ANY or not parent.actor_id:
            continue
        if parent.actor_id != t.actor_id:
            out.append(CallEdge(parent.actor_id, t.actor_id, parent, t))
    return tuple(out)


def _cycles(edges: tuple[WaitEdge, ...]) -> list[tuple[WaitEdge, ...]]:
    """Elementary cycles of the actor graph (small: one node per actor), each once."""
    adj: dict[str, list[WaitEdge]] = {}
    for e in edges:
        adj.setdefault(e.waiter, []).append(e)
    found: dict[tuple[str, ...], tuple[WaitEdge, ...]] = {}

    def walk(start: str, node: str, path: list[WaitEdge], seen: set[str]) -> None:
        for e in adj.get(node, []):
            if e.holder == start:
                cycle = (*path, e)
                ids = [x.waiter for x in cycle]
                k = ids.index(min(ids))
                key = tuple(ids[k:] + ids[:k])
                found.setdefault(key, cycle[k:] + cycle[:k])
            elif e.holder not in seen and e.holder > start and len(path) < 16:
                walk(start, e.holder, [*path, e], seen | {e.holder})

    for start in sorted(adj):
        walk(start, start, [], {start})
    return list(found.values())


def _persistent_ids(pages: tuple[TaskPageObs, ...]) -> set[str] | None:
    """Ids of tasks unfinished in both samples' unfinished pages (None: one sample only)."""
    by_sample: dict[int, set[str]] = {}
    for p in pages:
        if p.target == UNFINISHED_TASKS:
            by_sample.setdefault(p.sample, set()).update(
                t.task_id for t in p.tasks if t.state not in TASK_ENDED
            )
    if len(by_sample) < 2:
        return None
    first, last = by_sample[min(by_sample)], by_sample[max(by_sample)]
    return first & last


def _held(e: WaitEdge, persistent: set[str] | None) -> bool:
    if persistent is None:
        return False  # one sample cannot tell a deadlock from a passing queue
    tasks = [e.queued, e.holding] + ([e.waiting] if e.waiting is not None else [])
    return all(t.task_id in persistent for t in tasks)


def _paused(actors: dict[str, RayActor], state: dict[str, RayTask]) -> tuple[PausedEngine, ...]:
    out: list[PausedEngine] = []
    per_actor: dict[str, list[RayTask]] = {}
    for t in state.values():
        if t.actor_id and t.method in (PAUSE_METHOD, CONTINUE_METHOD):
            per_actor.setdefault(t.actor_id, []).append(t)
    for actor_id, tasks in per_actor.items():
        actor = actors.get(actor_id)
        pauses = [t for t in tasks if t.method == PAUSE_METHOD and t.state == TASK_FINISHED]
        if actor is None or actor.state != ACTOR_ALIVE or not pauses:
            continue
        last = max(pauses, key=lambda t: (t.creation_time_ms or 0, t.end_time_ms or 0))
        later = [
            t
            for t in tasks
            if t.method == CONTINUE_METHOD
            and (t.creation_time_ms or 0) >= (last.creation_time_ms or 0)
        ]
        if any(t.state in _STARTED for t in later):
            continue
        # an actor's method (a train rank's update_weights); never the driver's task, which runs
        # for the whole job
        caller = state.get(last.parent_task_id or "")
        running = (
            caller is not None and caller.actor_id is not None and caller.state in TASK_RUNNING_ANY
        )
        update = caller if running else None
        in_flight = _update_calls_after(last, actors, state)
        out.append(PausedEngine(actor, last, later[0] if later else None, update, in_flight))
    return tuple(out)


def _update_calls_after(
    pause: RayTask, actors: dict[str, RayActor], state: dict[str, RayTask]
) -> tuple[RayTask, ...]:
    """Calls of the weight-sync stage (the engine actors' update methods: flush_cache,
    update_weights_from_disk, update_weights_from_distributed, pull_weights, ...) that the pause's
    caller made at or after the pause and that have not ended: every update path (slime's disk
    reload from the driver, miles's, the distributed and tensor paths from train rank 0) pauses,
    makes such calls, then continues."""
    if not pause.parent_task_id:
        return ()
    out: list[RayTask] = []
    for t in state.values():
        actor = actors.get(t.actor_id or "")
        if (
            actor is None
            or t.parent_task_id != pause.parent_task_id
            or t.state in TASK_ENDED
            or t.method in (PAUSE_METHOD, CONTINUE_METHOD)
            or (t.creation_time_ms or 0) < (pause.creation_time_ms or 0)
        ):
            continue
        sig = method_stage(actor.class_name, t.method)
        if sig is not None and sig.stage in _UPDATE_STAGES:
            out.append(t)
    return tuple(sorted(out, key=_sort_key))


def _overlong(
    actors: dict[str, RayActor], state: dict[str, RayTask], now_ms: float
) -> tuple[OverlongTask, ...]:
    durations: dict[tuple[str, str], list[float]] = {}
    for t in state.values():
        if t.state == TASK_FINISHED and t.actor_id and t.start_time_ms and t.end_time_ms:
            key = (actors[t.actor_id].class_name if t.actor_id in actors else "", t.name)
            durations.setdefault(key, []).append((t.end_time_ms - t.start_time_ms) / 1000.0)
    out: list[OverlongTask] = []
    for t in state.values():
        actor = actors.get(t.actor_id or "")
        if actor is None or t.state not in TASK_RUNNING_ANY or not t.start_time_ms:
            continue
        earlier = durations.get((actor.class_name, t.name), [])
        if len(earlier) < OVERLONG_MIN_RUNS:
            continue
        elapsed = (now_ms - t.start_time_ms) / 1000.0
        longest = max(earlier)
        if elapsed >= OVERLONG_FACTOR * longest and elapsed - longest >= OVERLONG_MIN_EXTRA_S:
            out.append(OverlongTask(actor, t, elapsed, longest, len(earlier)))
    return tuple(out)

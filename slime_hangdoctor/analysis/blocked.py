"""When the evidence was taken and how long the blocked call had been running then.

An on-call reader of `analyse` asks "stuck for how long?", which the analysis time does not answer.
The bundle answers it where Ray's task table holds the call's start (`start_time_ms` of a RUNNING
task, read at the first sample): the culprit's own running call first (its actor or its pid), else
the oldest running call of the job (the one that waits on the culprit: the rollout manager's
`generate` behind a stuck engine, a surviving rank's `train` behind a dead one). Actor creation
tasks are left out (they "run" while the actor lives). Pure: reads the snapshot only.
"""

from __future__ import annotations

from slime_hangdoctor.parsers.ray_state import ACTOR_CREATION_TASK, RAY_STATE, TASK_RUNNING, RayTask
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.verdict import BlockedFor, Culprit

__all__ = ["blocked_for", "evidence_time"]


def evidence_time(snapshot: Snapshot) -> float | None:
    """When the evidence was taken (seconds since the epoch): the first sample, else the run's start."""
    manifest = snapshot.manifest
    first = min(manifest.sample_times, default=0.0)
    when = first if first > 0 else manifest.created_at
    return when if when > 0 else None


def blocked_for(snapshot: Snapshot, culprits: tuple[Culprit, ...]) -> BlockedFor | None:
    """The culprit's running Ray call, else the job's oldest one, with its age at `evidence_time`."""
    now = evidence_time(snapshot)
    if now is None:
        return None
    running = [
        t
        for t in snapshot.joined(RAY_STATE).tasks
        if t.state == TASK_RUNNING
        and t.task_type != ACTOR_CREATION_TASK
        and t.start_time_ms
        and t.start_time_ms / 1000.0 <= now
    ]
    for culprit in culprits:
        own = [t for t in running if _runs_on(t, culprit)]
        if own:
            return _age(min(own, key=_start), now, "the culprit's call, from its Ray task start")
    if running:
        return _age(
            min(running, key=_start), now, "the oldest running call, from its Ray task start"
        )
    return None


def _runs_on(task: RayTask, culprit: Culprit) -> bool:
    if culprit.actor_id is not None and task.actor_id == culprit.actor_id:
        return True
    return culprit.pid is not None and task.worker_pid == culprit.pid


def _start(task: RayTask) -> int:
    return task.start_time_ms or 0


def _age(task: RayTask, now: float, source: str) -> BlockedFor:
    call = task.name + (f" (pid {task.worker_pid})" if task.worker_pid is not None else "")
    return BlockedFor(seconds=now - _start(task) / 1000.0, call=call, source=source)

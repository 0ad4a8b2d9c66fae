"""Ray task queues (source ``ray_tasks``): actors in a wait-for cycle, engines left paused,
methods running far longer than their earlier runs (see `analysis/actor_queues.py`).
"""

from __future__ import annotations

from slime_hangdoctor.analysis.actor_queues import (
    RAY_TASKS,
    OverlongTask,
    PausedEngine,
    TaskView,
    WaitEdge,
    build_view,
)
from slime_hangdoctor.analysis.readers.sglang_http import (
    EngineRead,
    EngineState,
    read_engines,
    resume_step,
)
from slime_hangdoctor.analysis.signatures import method_stage
from slime_hangdoctor.analysis.source_analysis import (
    MEDIUM,
    STRONG,
    WEAK,
    Reading,
    Reads,
    SourceAnalysis,
    Suspect,
    suspect,
)
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.parsers.ray_state import RAY_STATE, RayActor, RayTask
from slime_hangdoctor.topology import CLASS_ROLES
from slime_hangdoctor.verdict import Finding, NextStep, Role, Severity, Stage


def _proc_of(world: World, actor: RayActor) -> Proc | None:
    for p in world.procs:
        if p.actor_id == actor.actor_id or (actor.pid is not None and p.pid == actor.pid):
            return p
    return None


def _label(world: World, actor: RayActor) -> str:
    p = _proc_of(world, actor)
    if p is not None and p.member is not None:
        return p.label
    return f"{actor.class_name} {actor.name or actor.actor_id[:8]}"


def _stage_of(actor: RayActor, task: RayTask | None) -> Stage | None:
    if task is None:
        return None
    sig = method_stage(actor.class_name, task.method)
    return sig.stage if sig is not None else None


def _edge_text(world: World, e: WaitEdge, actors: dict[str, RayActor]) -> str:
    waiter, holder = actors.get(e.waiter), actors.get(e.holder)
    w = _label(world, waiter) if waiter else e.waiter[:8]
    h = _label(world, holder) if holder else e.holder[:8]
    running = f" in {e.waiting.method}" if e.waiting is not None else ""
    how = "its call" if e.kind == "child" else "the same caller's call"
    return (
        f"{w}{running} waits on {h}: {how} {e.queued.method} is queued there behind "
        f"{e.holding.method}"
    )


def _role(actor: RayActor) -> Role | None:
    return CLASS_ROLES.get(actor.class_name)


def _engine_of(engines: tuple[EngineRead, ...], actor: RayActor) -> EngineRead | None:
    for e in engines:
        if any(p.actor_id == actor.actor_id for p in e.procs):
            return e
    return None


def _normal(p: PausedEngine, engines: tuple[EngineRead, ...]) -> bool:
    """A pause that a healthy step shows: the weight update that paused the engine still runs (its
    continue_generation has not come yet), or the engine was busy between the samples (its step
    counters or its weight_version moved: it is not held, whatever the history last caught)."""
    if not p.left_paused:
        return True
    e = _engine_of(engines, p.actor)
    return e is not None and e.state is EngineState.BUSY


# --------------------------------------------------------------------------- actor queues


def suspects(reads: Reads) -> list[Suspect]:
    world = reads.world
    view = build_view(world.snapshot)
    if view is None:
        return []
    actors = {a.actor_id: a for a in world.snapshot.joined(RAY_STATE).actors}
    out: list[Suspect] = []
    for cycle in view.cycles:
        text = " -> ".join(_edge_text(world, e, actors) for e in cycle)
        for e in cycle:
            actor = actors.get(e.waiter)
            role = _role(actor) if actor else None
            if actor is None or role is None:
                continue
            out.append(
                suspect(
                    RAY_TASKS,
                    role,
                    f"Ray task queues: wait-for cycle between actors ({len(cycle)} actors): {text}",
                    _proc_of(world, actor),
                    actor_id=actor.actor_id,
                    pid=actor.pid,
                    weight=STRONG,
                    stage=_stage_of(actor, e.waiting) or _stage_of(actor, e.holding),
                    evidence=tuple(_edge_text(world, x, actors) for x in cycle),
                )
            )
    engines = read_engines(reads.world)
    # (actor, why, weight, stage): a paused engine not explained by a normal update, then each
    # method that runs far longer than its earlier runs
    held: list[tuple[RayActor, str, int, Stage | None]] = [
        (p.actor, _paused_text(world, p), MEDIUM, None)
        for p in view.paused
        if not _normal(p, engines)
    ]
    held += [
        (o.actor, _overlong_text(world, o), WEAK, _stage_of(o.actor, o.task)) for o in view.overlong
    ]
    for actor, why, weight, stage in held:
        role = _role(actor)
        if role is not None:
            out.append(
                suspect(
                    RAY_TASKS,
                    role,
                    why,
                    _proc_of(world, actor),
                    actor_id=actor.actor_id,
                    pid=actor.pid,
                    weight=weight,
                    stage=stage,
                )
            )
    return out


def _paused_text(world: World, p: PausedEngine, engines: tuple[EngineRead, ...] = ()) -> str:
    if p.update is not None:
        return (
            f"Ray task history: {_label(world, p.actor)} is paused by a weight update in flight: "
            f"{_caller(world, p.update)} called its pause_generation and still runs; its "
            "continue_generation comes when that update ends (normal during a weight update)"
        )
    if p.in_flight:
        actors = {a.actor_id: a for a in world.snapshot.joined(RAY_STATE).actors}
        calls = ", ".join(
            f"{t.method} on {_label(world, actors[t.actor_id]) if t.actor_id in actors else '?'}"
            f" ({t.state})"
            for t in p.in_flight[:3]
        )
        return (
            f"Ray task history: {_label(world, p.actor)} is paused by a weight update in flight: "
            f"the caller that paused it has made calls of the update since that have not ended "
            f"({calls}); its continue_generation comes when they end (normal during a weight "
            "update, e.g. slime's disk reload, which the driver runs engine by engine)"
        )
    e = _engine_of(engines, p.actor)
    if e is not None and e.state is EngineState.BUSY:
        return (
            f"Ray task history: the last pause_generation of {_label(world, p.actor)} has no "
            "continue_generation after it in the history, but the engine served between the "
            f"samples ({e.evidence[0] if e.evidence else 'busy'}): not left paused"
        )
    tail = (
        "; its continue_generation is queued behind other calls"
        if p.continue_queued is not None
        else "; no continue_generation was called after it"
    )
    return (
        f"Ray task history: {_label(world, p.actor)} is left paused: its last pause_generation "
        f"finished{tail} (requests sent to it wait outside its scheduler)"
    )


def _caller(world: World, task: RayTask) -> str:
    actor = next(
        (a for a in world.snapshot.joined(RAY_STATE).actors if a.actor_id == task.actor_id), None
    )
    who = _label(world, actor) if actor is not None else task.name.rsplit(".", 1)[0]
    return f"{who}'s {task.method}"


def _overlong_text(world: World, o: OverlongTask) -> str:
    return (
        f"Ray task history: {_label(world, o.actor)} has run {o.task.method} for "
        f"{o.elapsed_s:.0f}s; its {o.earlier_runs} earlier runs took at most "
        f"{o.longest_earlier_s:.1f}s"
    )


def findings(
    world: World, view: TaskView | None = None, engines: tuple[EngineRead, ...] = ()
) -> list[Finding]:
    """`engines`: the engines' reads, to tell an engine left paused from one that served."""
    view = view or build_view(world.snapshot)
    if view is None:
        return []
    actors = {a.actor_id: a for a in world.snapshot.joined(RAY_STATE).actors}
    out: list[Finding] = []
    for cycle in view.cycles:
        out.append(
            Finding(
                "ray_tasks.wait_cycle",
                Severity.CRITICAL,
                f"Ray task queues: the actors wait on each other in a cycle that held over both "
                f"samples ({len(cycle)} actors; each runs one method at a time): a deadlock",
                tuple(_edge_text(world, e, actors) for e in cycle),
            )
        )
    for p in view.paused:
        normal = _normal(p, engines)
        caller: tuple[str, ...] = (
            () if p.update is None else (f"{p.update.name} {p.update.task_id[:12]} RUNNING",)
        )
        caller += tuple(f"{t.name} {t.task_id[:12]} {t.state}" for t in p.in_flight[:3])
        out.append(
            Finding(
                "ray_tasks.engine_paused_in_update" if normal else "ray_tasks.engine_paused",
                Severity.INFO if normal else Severity.WARNING,
                _paused_text(world, p, engines),
                (f"{p.pause.name} {p.pause.task_id[:12]} FINISHED", *caller),
            )
        )
    for o in view.overlong:
        out.append(Finding("ray_tasks.overlong_method", Severity.WARNING, _overlong_text(world, o)))
    waiting = [q for q in view.queues if q.queued and q.running]
    if waiting and not view.cycles:
        out.append(
            Finding(
                "ray_tasks.queues",
                Severity.INFO,
                "Ray task queues: calls wait behind a running method",
                tuple(
                    f"{_label(world, q.actor)}: runs {q.running[0].method}; queued: "
                    + ", ".join(t.method for t in q.queued[:5])
                    for q in waiting[:6]
                ),
            )
        )
    if view.history_partial:
        out.append(
            Finding(
                "ray_tasks.partial",
                Severity.INFO,
                "Ray task history: Ray truncated a task list (by task id, not by time): the "
                "paused-engine check was skipped",
            )
        )
    return out


def resume_paused(r: Reading) -> list[NextStep]:
    """An engine left paused (`ray_tasks.engine_paused`): the call that resumes it."""
    view = build_view(r.world.snapshot)
    if view is None:
        return []
    engines = read_engines(r.world)
    left = [p for p in view.paused if not _normal(p, engines)]
    return [resume_step(e.url) for p in left if (e := _engine_of(engines, p.actor)) is not None]


ANALYSIS = SourceAnalysis(
    name="ray_tasks",
    gives=(RAY_TASKS,),
    suspects=suspects,
    findings=lambda r: findings(r.world, engines=read_engines(r.world)),
    next_steps=resume_paused,
)

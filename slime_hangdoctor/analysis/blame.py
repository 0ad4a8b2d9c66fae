"""Blame follows who can still act: the last word on the candidates the suspect finders named.

Pure. The finders each name who the others wait for, from their own source (`merge.merge` joins
them); two things only the whole picture shows are decided here, in one place:

1. **A party that has returned will never come.** A candidate whose process finished its Ray task
   and sits idle (`World.returned`: no method running, its worker idle in every stack read) is not
   the one the others wait for: nothing it could do is pending. It leaves the contention, and the
   verdict says why (the finders that see a wait on it name the waiter instead: stacks' ranks in a
   collective their returned peers left, NCCL RAS and the flight recorder's ranks ahead of a
   returned one).
2. **A waiter passes the blame along its edge.** A candidate that waits, in its own stack, on a
   call to another Ray actor that Ray's task list shows held over both samples (its running
   method's call queued on that actor behind the method it runs, or running there) is not where
   the wait ends. The blame follows the held Ray edges to the actor at their far end: the one
   whose own running method keeps the others waiting. It stops at an actor that has returned
   (then the waiter keeps the blame: it waits on a path nobody will take) and in a cycle (every
   actor of a cycle is blamed together, by `ray_tasks.wait_cycle`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from slime_hangdoctor.analysis.actor_queues import (
    RAY_TASKS,
    CallEdge,
    TaskView,
    WaitEdge,
    build_view,
)
from slime_hangdoctor.analysis.merge import Merged, merge
from slime_hangdoctor.analysis.source_analysis import MEDIUM, STRONG, Suspect, by_of, suspect
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.parsers.ray_state import RAY_STATE
from slime_hangdoctor.topology import CLASS_ROLES, MemberKind

_MAX_HOPS = 16


@dataclass(frozen=True)
class Blame:
    """The candidates in the order blame decides (the first ones, at the top score, are the
    culprits), and what blame moved, in words: a returned party left out, a wait passed on."""

    candidates: tuple[Merged, ...]
    returned: tuple[str, ...] = ()
    passed: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Hop:
    holder: str  # actor id
    text: str


def assign(merged: list[Merged], world: World) -> Blame:
    """Apply both rules to `merged` (sorted by score, as `merge.merge` returns it)."""
    returned: list[str] = []
    kept: list[Merged] = []
    left: list[Merged] = []
    for m in merged:
        proc = _proc(world, m)
        why = world.returned(proc) if proc is not None else None
        if why is None:
            kept.append(m)
        else:
            left.append(m)
            returned.append(why)
    kept, passed = _pass_along(kept, world)
    ordered = sorted(kept, key=lambda g: (-g.score, -max(s.weight for s in g.suspects)))
    demoted = [dataclasses.replace(m, suspects=[_zero(s) for s in m.suspects]) for m in left]
    return Blame(tuple(ordered + demoted), tuple(dict.fromkeys(returned)), passed)


def _zero(s: Suspect) -> Suspect:
    return dataclasses.replace(s, weight=0, waits_elsewhere=True)


def _proc(world: World, m: Merged) -> Proc | None:
    pid = m.first("pid")
    node = m.first("node_ip")
    return world.find(pid, node) if isinstance(pid, int) else None  # type: ignore[arg-type]


def _hops(view: TaskView, world: World) -> dict[str, list[_Hop]]:
    """Held Ray edges out of each actor: its running method's call queued behind another actor's
    running method, or running on it."""
    out: dict[str, list[_Hop]] = {}
    for e in view.edges:
        if e.kind != "child" or e.waiting is None or not view.held(e):
            continue
        out.setdefault(e.waiter, []).append(_Hop(e.holder, _queue_text(world, e)))
    for c in view.calls:
        if view.held(c):
            out.setdefault(c.caller, []).append(_Hop(c.callee, _call_text(world, c)))
    return out


def _label(world: World, actor_id: str) -> str:
    p = _actor_proc(world, actor_id)
    if p is not None:
        return p.label
    a = next((a for a in world.snapshot.joined(RAY_STATE).actors if a.actor_id == actor_id), None)
    return f"{a.class_name} {actor_id[:8]}" if a is not None else f"actor {actor_id[:8]}"


def _actor_proc(world: World, actor_id: str) -> Proc | None:
    return next(
        (p for p in world.procs if p.actor_id == actor_id and p.kind is MemberKind.ACTOR),
        None,
    )


def _queue_text(world: World, e: WaitEdge) -> str:
    running = f"{e.waiting.method} " if e.waiting is not None else ""
    return (
        f"{_label(world, e.waiter)}'s {running}waits for its call {e.queued.method}, queued on "
        f"{_label(world, e.holder)} behind the {e.holding.method} it runs"
    )


def _call_text(world: World, c: CallEdge) -> str:
    return (
        f"{_label(world, c.caller)}'s {c.waiting.method} waits for its call {c.called.method}, "
        f"which {_label(world, c.callee)} runs"
    )


def _pass_along(kept: list[Merged], world: World) -> tuple[list[Merged], tuple[str, ...]]:
    if not kept:
        return kept, ()
    view = build_view(world.snapshot)
    if view is None or view.persistent is None:
        return kept, ()
    hops = _hops(view, world)
    if not hops:
        return kept, ()
    top = kept[0].score
    passed: list[str] = []
    added: list[Suspect] = []
    out: list[Merged] = []
    for m in kept:
        proc = _proc(world, m)
        end = _end(world, hops, proc) if m.score == top and proc is not None else None
        if end is None:
            out.append(m)
            continue
        holder, path = end
        text = "; ".join(path)
        passed.append(text)
        out.append(dataclasses.replace(m, suspects=[_waits(s) for s in m.suspects]))
        added.append(_ended_at(world, holder, text, m))
    if not added:
        return kept, ()
    suspects = [s for m in out for s in m.suspects] + added
    return merge(suspects, world), tuple(dict.fromkeys(passed))


def _waits(s: Suspect) -> Suspect:
    return dataclasses.replace(s, waits_elsewhere=True)


def _end(world: World, hops: dict[str, list[_Hop]], proc: Proc) -> tuple[Proc, list[str]] | None:
    """The actor where the held Ray edges out of `proc` end, and the edges in words; None where
    `proc` does not wait on one, the edges loop, or they end at an actor that has returned."""
    read = proc.latest
    if proc.actor_id is None or read is None or not read.primary.waiting:
        return None
    here: str = proc.actor_id
    path: list[str] = []
    seen = {here}
    while here in hops and len(path) < _MAX_HOPS:
        hop = hops[here][0]
        if hop.holder in seen:
            return None  # a cycle: ray_tasks.wait_cycle blames every actor of it
        path.append(hop.text)
        seen.add(hop.holder)
        here = hop.holder
    end = _actor_proc(world, here)
    if not path or end is None or world.returned(end) is not None:
        return None
    return end, path


def _ended_at(world: World, end: Proc, text: str, m: Merged) -> Suspect:
    role = end.role
    if role is None and end.member is not None:
        role = CLASS_ROLES.get(end.member.class_name or "")
    if role is None:
        role = m.role
    own = end.latest.describe() if end.latest is not None else "no stack read"
    method = end.member.method if end.member is not None and end.member.method else "its method"
    why = (
        f"Ray task queues: the wait ends at {end.label}: {text}; {end.label} runs {method} and "
        f"is {own}: its own call keeps the others waiting"
    )
    return suspect(
        RAY_TASKS,
        role,
        why,
        end,
        weight=min(STRONG, max(MEDIUM, m.score)),
        evidence=tuple(f"{s.source}: {s.why}" for s in m.suspects[:3]),
        by=by_of(_pass_along),
    )

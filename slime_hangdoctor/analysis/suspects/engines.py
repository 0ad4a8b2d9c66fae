"""SGLang engines: dead, unresponsive or stuck with requests in flight (HTTP); an engine actor that
waits on its own server; an engine's scheduler absent from the weight broadcast the trainers wait in."""

from __future__ import annotations

from collections.abc import Sequence

from slime_hangdoctor.analysis.engines import HUNG_ENGINE_STATES, EngineRead, EngineState
from slime_hangdoctor.analysis.signatures import Block
from slime_hangdoctor.analysis.suspects.suspect import (
    MEDIUM,
    STRONG,
    WEAK,
    Evidence,
    Reads,
    Suspect,
    brief,
    suspect,
)
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.verdict import Role, Stage

MESSAGES = {
    "engine-not-serving": "SGLang engines are dead, unresponsive or stuck",
}


def _engine_proc(e: EngineRead) -> Proc | None:
    return e.server or (e.schedulers[0] if e.schedulers else None) or e.actor


def suspects(reads: Reads) -> list[Suspect]:
    world, engines = reads.world, reads.engines
    out: list[Suspect] = []
    weights = {
        EngineState.DEAD: STRONG,
        EngineState.UNRESPONSIVE: MEDIUM,
        EngineState.STUCK: MEDIUM,
    }
    words = {
        EngineState.DEAD: "is dead (no server answers)",
        EngineState.UNRESPONSIVE: "is unresponsive: its scheduler does not answer",
        EngineState.STUCK: "is stuck: requests in flight and no token produced in the window",
    }
    for e in engines:
        if e.state not in weights:
            continue
        proc = _engine_proc(e)
        stage = _engine_stage(e)
        inside = _with_trainers(world, e)
        why = f"engine {e.url} {words[e.state]}"
        weight = weights[e.state]
        if inside and e.state is not EngineState.DEAD:
            why += (
                f" (its scheduler is {brief(inside[0])}: it waits in the same collective as the "
                "trainers)"
            )
            weight = WEAK
        out.append(
            suspect(
                "sglang",
                Role.SGLANG_ENGINE,
                why,
                proc,
                engine_url=e.url,
                node_ip=e.node_ip or (proc.node_ip if proc else None),
                weight=weight,
                stage=stage,
                evidence=e.evidence,
                waits_elsewhere=bool(inside),
            )
        )
    out.extend(_held_calls(engines))
    out.extend(_broadcast_absentees(world, engines))
    out.extend(_blocked_engine_actors(world, engines))
    return out


def _held_calls(engines: tuple[EngineRead, ...]) -> list[Suspect]:
    """An engine whose weight-sync / offload call was in flight at the HTTP layer in every sample
    (`sglang:http_requests_active`): that call is inside the engine. Weak alone: a healthy sync
    also has one in flight for a while."""
    out: list[Suspect] = []
    for e in engines:
        if e.state in HUNG_ENGINE_STATES or not e.calls_held:
            continue
        proc = _engine_proc(e)
        out.append(
            suspect(
                "sglang",
                Role.SGLANG_ENGINE,
                f"engine {e.url}: POST {e.calls_held[0]} has been in flight in every sample "
                "(sglang:http_requests_active): the call has not returned",
                proc,
                engine_url=e.url,
                node_ip=e.node_ip or (proc.node_ip if proc else None),
                weight=WEAK,
                stage=e.call_stage,
                evidence=e.evidence,
            )
        )
    return out


def _engine_stage(e: EngineRead) -> Stage | None:
    """The stage the engine's stacks show, else the stage of the control call it has in flight."""
    for p in (*e.schedulers, e.actor):
        if p is not None and p.latest is not None and p.latest.stage is not None:
            return p.latest.stage
    return e.call_stage


def _trainers_in(world: World, stages: set[Stage]) -> list[Proc]:
    return [
        p
        for p in world.by_role(Role.TRAIN_RANK)
        if p.latest is not None and p.latest.stage in stages and p.latest.primary.waiting
    ]


_SHARED_STAGES = (Stage.NCCL_BROADCAST, Stage.WEIGHT_SYNC)


def _with_trainers(world: World, e: EngineRead) -> list[Proc]:
    """Schedulers of `e` that wait in a collective shared with trainers that wait in the same
    weight-sync stage (the broadcast group): such a scheduler is a victim like the trainers."""
    trainer_stages = {p.latest.stage for p in _trainers_in(world, set(_SHARED_STAGES)) if p.latest}
    return [
        s
        for s in e.schedulers
        if s.latest is not None
        and s.latest.primary.in_collective
        and s.latest.stage in _SHARED_STAGES
        and s.latest.stage in trainer_stages
    ]


_ENGINE_WAIT_STAGES = frozenset(
    {Stage.WEIGHT_SYNC, Stage.NCCL_BROADCAST, Stage.OFFLOAD_ONLOAD, Stage.STARTUP}
)


def _blocked_engine_actors(world: World, engines: tuple[EngineRead, ...]) -> list[Suspect]:
    """An SGLangEngine actor that waits on its own server (slime's `_make_request` has no timeout)
    in a control call, while the job waits on that call: the engine's server is not answering."""
    out: list[Suspect] = []
    for e in engines:
        actor = e.actor
        read = actor.latest if actor is not None else None
        if actor is None or read is None:
            continue
        if read.block not in (Block.HTTP, Block.PARKED, Block.SLEEP):
            continue
        if read.stage not in _ENGINE_WAIT_STAGES or _with_trainers(world, e):
            continue
        out.append(
            suspect(
                "stacks",
                Role.SGLANG_ENGINE,
                f"engine {e.url}: its SGLangEngine actor is {read.describe()}: the server never "
                "answers that call (slime's engine requests carry no timeout)",
                actor,
                engine_url=e.url,
                weight=MEDIUM,
                stage=read.stage,
                evidence=tuple(f.where for f in read.primary.frames[:6]),
            )
        )
    return out


def _broadcast_absentees(world: World, engines: tuple[EngineRead, ...]) -> list[Suspect]:
    """Trainers wait in the weight broadcast / group creation; an engine's scheduler is elsewhere."""
    waiting = _trainers_in(world, {Stage.NCCL_BROADCAST}) or [
        p
        for p in _trainers_in(world, {Stage.WEIGHT_SYNC})
        if p.latest is not None and p.latest.block is Block.RENDEZVOUS
    ]
    if not waiting:
        return []
    stage = waiting[0].latest.stage if waiting[0].latest else None
    out: list[Suspect] = []
    for e in engines:
        scheds = [s for s in e.schedulers if s.latest is not None]
        if not scheds or e.state is EngineState.DEAD:
            continue
        absent = [
            s
            for s in scheds
            if s.latest is not None
            and (s.latest.stage != stage or not s.latest.primary.in_collective)
        ]
        if not absent:
            continue
        s = absent[0]
        out.append(
            suspect(
                "stacks",
                Role.SGLANG_ENGINE,
                f"engine {e.url}: scheduler pid {s.pid} is not in the weight "
                f"{'broadcast' if stage is Stage.NCCL_BROADCAST else 'group creation'} the "
                f"trainers wait in; it is {brief(s)}",
                s,
                engine_url=e.url,
                weight=MEDIUM,
                stage=stage,
                evidence=tuple(f"{p.label}: {brief(p)}" for p in waiting[:4]),
            )
        )
    return out


def evidence(reads: Reads, suspects: Sequence[Suspect]) -> list[Evidence]:
    engines = reads.engines
    return [
        Evidence(
            "sglang",
            "engine-not-serving",
            f"engine {e.url} {e.state.value}: " + "; ".join(e.evidence[:2]),
            2,
        )
        for e in engines
        if e.state in HUNG_ENGINE_STATES
    ]

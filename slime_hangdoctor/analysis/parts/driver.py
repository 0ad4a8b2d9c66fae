"""The driver: every slime actor idle, and the driver waits (on a result nobody computes) or works."""

from __future__ import annotations

from slime_hangdoctor.analysis.signatures import Block
from slime_hangdoctor.analysis.source_analysis import (
    MEDIUM,
    WEAK,
    Reads,
    Source,
    SourceAnalysis,
    Suspect,
    suspect,
)
from slime_hangdoctor.analysis.world import Proc
from slime_hangdoctor.topology import MemberKind
from slime_hangdoctor.verdict import Role

DRIVER = Source("driver")  # the job's driver (read from its stacks)


def suspects(reads: Reads) -> list[Suspect]:
    world = reads.world
    drivers = [p for p in world.by_role(Role.DRIVER) if p.latest is not None]
    actors = [
        p
        for p in world.procs
        if p.role in (Role.TRAIN_RANK, Role.ROLLOUT_MANAGER)
        and p.member is not None
        and p.member.kind is MemberKind.ACTOR
    ]
    if not drivers or not actors:
        return []
    idle = all(_actor_idle(p) for p in actors)
    if not idle:
        return []
    d = drivers[0]
    read = d.latest
    if read is None:
        return []
    if read.block is Block.RAY_GET:
        why = (
            "the driver waits in ray.get but no slime actor is running a method: the result "
            "it waits for is not being computed (a task that died, or an object never produced)"
        )
        weight = WEAK
    else:
        why = f"every slime actor is idle and the driver is {read.describe()}"
        weight = MEDIUM
    return [suspect(DRIVER, Role.DRIVER, why, d, weight=weight, stage=read.stage)]


def _actor_idle(p: Proc) -> bool:
    if p.latest is not None:
        return p.latest.block is Block.IDLE_WORKER
    return p.member is not None and p.member.method is None


ANALYSIS = SourceAnalysis(name="driver", gives=(DRIVER,), suspects=suspects)

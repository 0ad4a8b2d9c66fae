"""The end of the ray.get chain (a fallback: runs only when no other part named anyone). Everyone
waits, some in ray.get on other actors; the actors that wait on something outside Ray (their own
HTTP server, a sleep-poll, a child process) end the chain."""

from __future__ import annotations

from slime_hangdoctor.analysis.readers.pyspy import STACKS
from slime_hangdoctor.analysis.signatures import Block
from slime_hangdoctor.analysis.source_analysis import WEAK, Reads, SourceAnalysis, Suspect, suspect
from slime_hangdoctor.analysis.world import children_text
from slime_hangdoctor.verdict import Role

_CHAIN_END = frozenset({Block.PARKED, Block.SLEEP, Block.HTTP, Block.SUBPROCESS})


def suspects(reads: Reads) -> list[Suspect]:
    """The actors where the chain of ray.get waits ends."""
    world = reads.world
    stacked = [(p, p.latest) for p in world.procs if p.role is not None and p.latest is not None]
    if not stacked or any(
        r.cpu_busy or not (r.primary.waiting or r.block is Block.PARKED) for _, r in stacked
    ):
        return []
    if not any(r.block is Block.RAY_GET for _, r in stacked):
        return []
    ends = [
        (p, r)
        for p, r in stacked
        if r.block in _CHAIN_END and r.stage is not None and p.role is not Role.DRIVER
    ]
    if not ends or len(ends) > 4:
        return []
    waiting = [p for p, r in stacked if r.block is Block.RAY_GET]
    return [
        suspect(
            STACKS,
            p.role or Role.TRAIN_RANK,
            f"stacks: {p.label} is where the chain of ray.get waits ends: it is {r.describe()}"
            f"{children_text(world, p) if r.block is Block.SUBPROCESS else ''} (waiting on it: {', '.join(q.label for q in waiting[:4])})",
            p,
            weight=WEAK,
            stage=r.stage,
            evidence=tuple(f.where for f in r.primary.frames[:6]),
        )
        for p, r in ends
    ]


ANALYSIS = SourceAnalysis(name="chain", gives=(STACKS,), suspects=suspects, fallback=True)

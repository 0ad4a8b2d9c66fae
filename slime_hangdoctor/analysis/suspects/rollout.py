"""The RolloutManager's event loop: reward or other synchronous code hogging it, or requests that
never reach an engine (every engine idle while the rollout coroutines wait on I/O)."""

from __future__ import annotations

from collections.abc import Sequence

from slime_hangdoctor.analysis.engines import EngineRead
from slime_hangdoctor.analysis.signatures import Block
from slime_hangdoctor.analysis.stacks import ProcessRead
from slime_hangdoctor.analysis.suspects.suspect import (
    MEDIUM,
    WEAK,
    Evidence,
    Reads,
    Suspect,
    suspect,
)
from slime_hangdoctor.analysis.world import Proc
from slime_hangdoctor.verdict import Role, Stage

MESSAGES = {
    "rollout-loop-blocked": "The rollout event loop is blocked",
}


def suspects(reads: Reads) -> list[Suspect]:
    world, engines = reads.world, reads.engines
    out: list[Suspect] = []
    for rm in world.by_role(Role.ROLLOUT_MANAGER):
        read = rm.latest
        loop = read.loop if read else None
        if read is None or loop is None:
            continue
        if loop.block is Block.CPU:
            both = all(
                r.loop is not None and r.loop.block is Block.CPU and r.loop.stage is loop.stage
                for r in rm.reads
            )
            stage = loop.stage if loop.stage is Stage.REWARD else Stage.ROLLOUT_DISPATCH
            what = "the reward function" if stage is Stage.REWARD else "synchronous code"
            out.append(
                suspect(
                    "rollout",
                    Role.ROLLOUT_MANAGER,
                    f"the rollout event loop is CPU-bound in {what} ({loop.describe()}): while "
                    "it runs, no rollout coroutine can send or receive a request"
                    + (" (in every sample)" if both and len(rm.reads) > 1 else ""),
                    rm,
                    stage=stage,
                    weight=MEDIUM if both else WEAK,
                    evidence=tuple(f.where for f in loop.frames[:8]),
                )
            )
        elif loop.block not in (Block.EVENT_LOOP, Block.UNKNOWN):
            out.append(
                suspect(
                    "rollout",
                    Role.ROLLOUT_MANAGER,
                    f"the rollout event loop is blocked in a synchronous call "
                    f"({loop.describe()}): every rollout coroutine waits behind it",
                    rm,
                    stage=loop.stage or read.stage or Stage.ROLLOUT_DISPATCH,
                    weight=MEDIUM,
                    evidence=tuple(f.where for f in loop.frames[:8]),
                )
            )
        elif read.stage in (Stage.ROLLOUT_DISPATCH, Stage.EVAL):
            out.extend(_requests_lost(rm, read, engines))
    return out


def _requests_lost(rm: Proc, read: ProcessRead, engines: tuple[EngineRead, ...]) -> list[Suspect]:
    known = [e for e in engines if e.in_flight is not None]
    if not known or any((e.in_flight or 0) > 0 or e.moving for e in known):
        return []
    return [
        suspect(
            "rollout",
            Role.ROLLOUT_MANAGER,
            "rollout coroutines are waiting on I/O (event loop idle in select) but no engine has "
            "a request running or queued: the requests are stuck before the engines (router, a "
            "remote reward service, or a custom generate function awaiting something)",
            rm,
            stage=read.stage,
            weight=WEAK,
            evidence=tuple(f"engine {e.url}: {', '.join(e.evidence)}" for e in known[:4]),
        )
    ]


def evidence(reads: Reads, suspects: Sequence[Suspect]) -> list[Evidence]:
    """The loop blocked (a MEDIUM rollout suspect) is itself a sign of a hang."""
    return [
        Evidence("rollout", "rollout-loop-blocked", s.why, 1)
        for s in suspects
        if s.source == "rollout" and s.weight >= MEDIUM
    ]

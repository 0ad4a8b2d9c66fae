"""Suspects from the TCP connections of the slime processes (procfs sockets): an engine whose callers
hold connections with requests in flight on them (each kind of evidence named) across both samples
while its scheduler has no work (analysis/network.py). Idle pooled connections are no suspect."""

from __future__ import annotations

from collections import Counter

from slime_hangdoctor.analysis.network import InFlightKind, held_lines, held_requests
from slime_hangdoctor.analysis.signatures import Block
from slime_hangdoctor.analysis.suspects.suspect import MEDIUM, WEAK, Suspect, SuspectInputs
from slime_hangdoctor.analysis.world import Proc
from slime_hangdoctor.verdict import Role, Stage


def _caller_waits(p: Proc) -> bool:
    """The caller's stack is parked waiting on I/O (an idle event loop or a blocking read), not
    computing: it waits for the engine's answer."""
    read = p.latest
    if read is None:
        return True
    loop = read.loop
    if loop is not None and loop.block is Block.CPU:
        return False
    return not read.cpu_busy


def suspects(reads: SuspectInputs) -> list[Suspect]:
    out: list[Suspect] = []
    for h in held_requests(reads.world, reads.engines):
        # the engine, the router or the sockets show the requests themselves; the caller's own
        # wait alone says only that it waits on someone
        shown = set(h.kinds) - {InFlightKind.CALLER_AWAITS}
        strong = (h.persistent and h.singled_out) or bool(shown)
        waiting = all(_caller_waits(p) for p, _ in h.callers)
        stages = [p.latest.stage for p, _ in h.callers if p.latest is not None and p.latest.stage]
        stage = Counter(stages).most_common(1)[0][0] if stages else Stage.ROLLOUT_DISPATCH
        proc = h.engine.server or h.engine.actor
        out.append(
            Suspect(
                source="sockets",
                role=Role.SGLANG_ENGINE,
                why=(
                    f"callers hold {h.connections} connection(s) to this engine with requests in "
                    f"flight ({', '.join(k.value for k in h.kinds)}) while its scheduler has no "
                    "running or queued request: the requests wait outside the scheduler (paused "
                    "generation, a tokenizer-side lock, a request never reaped)"
                ),
                evidence=held_lines(h),
                weight=MEDIUM if strong and waiting else WEAK,
                pid=proc.pid if proc else None,
                node_ip=h.engine.node_ip or (proc.node_ip if proc else None),
                engine_url=h.engine.url,
                actor_id=h.engine.actor.actor_id if h.engine.actor else None,
                stage=stage,
            )
        )
    return out

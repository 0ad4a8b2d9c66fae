"""The TCP connections of the slime processes (procfs sockets, read by analysis/network.py): an
engine whose callers hold connections with requests in flight on them (each kind of evidence named)
across both samples while its scheduler has no work is a suspect; idle pooled connections are none.
Of a hung job, the findings say who holds the requests and list the connections by peer."""

from __future__ import annotations

from collections import Counter

from slime_hangdoctor.analysis.network import (
    SOCKETS,
    InFlightKind,
    connection_lines,
    held_lines,
    held_requests,
    idle_pools,
)
from slime_hangdoctor.analysis.readers.sglang_http import EngineRead, read_engines
from slime_hangdoctor.analysis.signatures import Block
from slime_hangdoctor.analysis.source_analysis import (
    MEDIUM,
    WEAK,
    Reading,
    Reads,
    SourceAnalysis,
    Suspect,
)
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.verdict import Finding, Role, Severity, Stage, Status


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


def suspects(reads: Reads) -> list[Suspect]:
    out: list[Suspect] = []
    for h in held_requests(reads.world, read_engines(reads.world)):
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
                source=SOCKETS,
                role=Role.SGLANG_ENGINE,
                why=(
                    f"callers hold {h.connections} connection(s) to this engine with requests in "
                    f"flight ({', '.join(k.words for k in h.kinds)}) while its scheduler has no "
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
                stands_in=True,  # the engine holds the requests, not one process of it
            )
        )
    return out


def network_findings(world: World, engines: tuple[EngineRead, ...]) -> list[Finding]:
    out: list[Finding] = []
    held = held_requests(world, engines)
    if held:
        out.append(
            Finding(
                "requests-held-outside-scheduler",
                Severity.CRITICAL if any(h.persistent for h in held) else Severity.WARNING,
                "Callers hold requests in flight (procfs TCP sockets, with the evidence of each) "
                "to engines whose scheduler has no work: the requests wait outside the scheduler",
                tuple(line for h in held[:4] for line in held_lines(h))[:12],
            )
        )
    lines = connection_lines(world, engines)
    lines.extend(h.describe_idle() for h in idle_pools(world, engines)[:4])
    if lines:
        out.append(
            Finding(
                "connections",
                Severity.INFO,
                "Open TCP connections of the slime processes, by peer (procfs sockets)",
                tuple(lines[:12]),
            )
        )
    return out


def _hung_findings(reading: Reading) -> list[Finding]:
    """Who holds the requests: asked only of a hung job (a progressing one holds requests too)."""
    if reading.status is not Status.HUNG:
        return []
    return network_findings(reading.world, read_engines(reading.world))


ANALYSIS = SourceAnalysis(
    name="sockets",
    gives=(SOCKETS,),
    suspects=suspects,
    findings=_hung_findings,
)

"""The process table: slime processes seen in an earlier sample and gone (or zombie) in the last."""

from __future__ import annotations

from slime_hangdoctor.analysis.engines import EngineState
from slime_hangdoctor.analysis.suspects.routers import gone_routers
from slime_hangdoctor.analysis.suspects.suspect import STRONG, Suspect, SuspectInputs, suspect


def suspects(reads: SuspectInputs) -> list[Suspect]:
    dead_engines = {e.url for e in reads.engines if e.state is EngineState.DEAD}
    # a dead engine, or a router that is gone: their own finders say what is known of them
    told = dead_engines | {g.url for g in gone_routers(reads.world)}
    return _dead_processes(reads, told)


def _dead_processes(reads: SuspectInputs, dead_engines: set[str]) -> list[Suspect]:
    """Slime processes seen in an earlier /proc sample and gone (or zombie) in the last one."""
    return [
        suspect(
            "processes",
            p.role,
            f"{p.label} (pid {p.pid}) is gone from the process table: it died during the window",
            p,
            weight=STRONG,
        )
        for p in reads.world.procs
        if p.role is not None and p.dead and (p.engine_url or "") not in dead_engines
    ]

"""The two things a suspect finder returns, and what every finder reads.

A `Suspect` is one evidence source naming one process (engine, rank, GPU) as the one the others wait
for, with a weight; `merge.merge` joins suspects that name the same process. An `Evidence` is one
reason to believe the job is hung at all, whoever is to blame. `SuspectInputs` is the finders' whole input.
"""

from __future__ import annotations

from dataclasses import dataclass

from slime_hangdoctor.analysis.engines import EngineRead
from slime_hangdoctor.analysis.progress import Progress
from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.verdict import Role, Stage

STRONG = 3  # the source names this process as the one missing (RAS, FR, dead engine)
MEDIUM = 2
WEAK = 1


@dataclass(frozen=True)
class SuspectInputs:
    """What every suspect and evidence finder reads (all pure, all built once per diagnosis)."""

    world: World
    engines: tuple[EngineRead, ...]
    progress: Progress
    moving_comms: frozenset[str]  # NCCL RAS communicators whose counts rose between samples


@dataclass(frozen=True)
class Suspect:
    source: Source
    role: Role
    why: str
    evidence: tuple[str, ...] = ()
    weight: int = WEAK
    pid: int | None = None
    node_ip: str | None = None
    rank: int | None = None
    engine_url: str | None = None
    actor_id: str | None = None
    gpu: int | None = None
    stage: Stage | None = None  # the stage this evidence points at (e.g. the stuck collective's)
    waits_elsewhere: bool = False  # the suspect itself waits on something else (chain continues)


@dataclass(frozen=True)
class Evidence:
    """One reason to believe the job is hung."""

    source: Source
    rule: str  # the finding id it is reported under (see the finder's EvidenceFinder.messages)
    text: str
    strength: int  # 1 weak, 2 strong


def from_proc(proc: Proc | None, **kw: object) -> dict[str, object]:
    """Identity fields of a suspect, filled from what the world knows about the process. A process
    that a slime process forked (`Proc.is_child`: an async checkpoint writer, a DataLoader worker)
    is not a culprit of its own: the suspect names its parent (for a train rank, the rank), and the
    finder's `why` names the child as where it waits."""
    out: dict[str, object] = dict(kw)
    if proc is None:
        return out
    known: dict[str, object] = {
        "pid": proc.parent_pid if proc.is_child and proc.parent_pid else proc.pid,
        "node_ip": proc.node_ip,
        "rank": proc.rank,
        "engine_url": proc.engine_url,
        "actor_id": proc.actor_id,
        "gpu": proc.gpu.index if proc.gpu is not None else None,
    }
    for key, value in known.items():
        if out.get(key) is None and value is not None:
            out[key] = value
    return out


def suspect(source: Source, role: Role, why: str, proc: Proc | None, **kw: object) -> Suspect:
    fields = from_proc(proc, **kw)
    return Suspect(source=source, role=role, why=why, **fields)  # type: ignore[arg-type]


def brief(p: Proc) -> str:
    return p.latest.describe() if p.latest else "no stack"

"""Who the others wait for: one suspect finder per evidence source, and the registries that run them.

Each module here reads one source (through `SuspectInputs`, built once per diagnosis) and returns the
`Suspect`s it names, independently of the others; some also return `Evidence` that the job hangs at
all. `merge.merge` joins suspects that name the same process, and the highest score wins.

To add a source: write `suspects/<source>.py` with `suspects(reads)` (and, if the source can show a
hang by itself, `evidence(reads, suspects)` plus its `MESSAGES`), then add one line to
`SUSPECT_FINDERS` (and one to `EVIDENCE_FINDERS`). Order matters only for ties: earlier finders'
suspects come first in a merged candidate. docs/architecture.md walks through an example.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from slime_hangdoctor.analysis.engines import EngineRead
from slime_hangdoctor.analysis.progress import Progress
from slime_hangdoctor.analysis.source_analysis import source_analyses
from slime_hangdoctor.analysis.suspects import (
    chain,
    driver,
    engines,
    environ,
    flight_recorder,
    gpu,
    gpu_kernel,
    kernel,
    placement,
    plasma,
    processes,
    progress,
    ras,
    ray,
    ray_tasks,
    request_path,
    rollout,
    routers,
    sockets,
    stacks,
)
from slime_hangdoctor.analysis.suspects.suspect import Evidence, Suspect, SuspectInputs
from slime_hangdoctor.analysis.world import World
from slime_hangdoctor.verdict import Finding


@dataclass(frozen=True)
class SuspectFinder:
    name: str
    find: Callable[[SuspectInputs], list[Suspect]]
    fallback: bool = False  # runs only when no other finder named anyone


@dataclass(frozen=True)
class EvidenceFinder:
    name: str
    find: Callable[[SuspectInputs, Sequence[Suspect]], list[Evidence]]
    messages: Mapping[str, str] = field(default_factory=dict)  # finding id -> its headline


SUSPECT_FINDERS: tuple[SuspectFinder, ...] = (
    SuspectFinder("ras", ras.suspects),
    SuspectFinder("flight_recorder", flight_recorder.suspects),
    SuspectFinder("gpu", gpu.suspects),
    SuspectFinder("gpu_kernel", gpu_kernel.suspects),
    SuspectFinder("stacks", stacks.suspects),
    SuspectFinder("engines", engines.suspects),
    SuspectFinder("ray", ray.suspects),
    SuspectFinder("ray_tasks", ray_tasks.suspects),
    SuspectFinder("ray_placement", placement.suspects),
    SuspectFinder("ray_plasma", plasma.suspects),
    SuspectFinder("processes", processes.suspects),
    SuspectFinder("routers", routers.suspects),
    SuspectFinder("rollout", rollout.suspects),
    SuspectFinder("driver", driver.suspects),
    SuspectFinder("sockets", sockets.suspects),
    SuspectFinder("environ", environ.suspects),
    SuspectFinder("kernel", kernel.suspects),
    SuspectFinder("request_path", request_path.suspects),
    SuspectFinder("chain", chain.suspects, fallback=True),
)

EVIDENCE_FINDERS: tuple[EvidenceFinder, ...] = (
    EvidenceFinder("ras", ras.evidence, ras.MESSAGES),
    EvidenceFinder("flight_recorder", flight_recorder.evidence, flight_recorder.MESSAGES),
    EvidenceFinder("gpu", gpu.evidence, gpu.MESSAGES),
    EvidenceFinder("engines", engines.evidence, engines.MESSAGES),
    EvidenceFinder("rollout", rollout.evidence, rollout.MESSAGES),
    EvidenceFinder("stacks", stacks.evidence, stacks.MESSAGES),
    EvidenceFinder("progress", progress.evidence, progress.MESSAGES),
    EvidenceFinder("request_path", request_path.evidence, request_path.MESSAGES),
)


def evidence_messages() -> Mapping[str, str]:
    """Finding id -> headline, of every evidence finder (the sources' own ones included)."""
    found = {rule: text for f in EVIDENCE_FINDERS for rule, text in f.messages.items()}
    for analysis in source_analyses():
        found.update(analysis.messages)
    return found


def reads_of(world: World, engines: tuple[EngineRead, ...], progress: Progress) -> SuspectInputs:
    return SuspectInputs(world, engines, progress, frozenset(ras.moving_ras_comms(world)))


def find_suspects(reads: SuspectInputs) -> list[Suspect]:
    """Every finder's suspects, in registry order; the fallbacks only when nobody was named."""
    out: list[Suspect] = []
    for finder in SUSPECT_FINDERS:
        if not finder.fallback:
            out += finder.find(reads)
    for analysis in source_analyses():
        if analysis.suspects is not None:
            out += analysis.suspects(reads)
    if not out:
        for finder in SUSPECT_FINDERS:
            if finder.fallback:
                out += finder.find(reads)
    return out


def hang_evidence(reads: SuspectInputs, suspects: Sequence[Suspect]) -> list[Evidence]:
    """Every reason to believe the job is hung, in registry order."""
    out: list[Evidence] = []
    for finder in EVIDENCE_FINDERS:
        out += finder.find(reads, suspects)
    for analysis in source_analyses():
        if analysis.evidence is not None:
            out += analysis.evidence(reads, suspects)
    return out


def ray_findings(world: World, engines: tuple[EngineRead, ...] = ()) -> list[Finding]:
    """What Ray's state says beside the suspects: queues and cycles, placement waits, deaths."""
    return (
        ray_tasks.findings(world, engines=engines)
        + placement.findings(world)
        + plasma.findings(world)
        + ray.findings(world)
    )

"""The rollout's request path (analysis/parts/request_path/hops.py): a hop that holds the job's requests is the
culprit, even while the engines still decode what passed it before (miles PR#1602); and it tells
`progress.combine` that the engines' work is not the job's progress then."""

from __future__ import annotations

from collections.abc import Sequence

from slime_hangdoctor.analysis.parts.request_path.hops import holds, request_path
from slime_hangdoctor.analysis.readers.proof import Moved, Proof, window_s
from slime_hangdoctor.analysis.source_analysis import (
    STRONG,
    Evidence,
    Reads,
    Source,
    SourceAnalysis,
    Suspect,
    cpu_wanted_s,
    suspect,
)
from slime_hangdoctor.analysis.world import World
from slime_hangdoctor.verdict import Role, Stage

REQUEST_PATH = Source("request_path")  # the hops between the RolloutManager and the engines

MESSAGES = {
    "request-path-held": (
        "A process on the rollout's request path holds the job's requests: CPU-bound in one "
        "frame at both samples while requests pile up at it (what the engines still decode is "
        "not the job's progress)"
    ),
}


def progress(world: World) -> Moved:
    """No work of its own: the hops that hold the job's requests, for `combine`'s rule."""
    return Moved(
        Proof.WORK,
        held=holds(world, window_s(world), cpu_wanted_s),
        path_unseen=not request_path(world)[1],
    )


def suspects(reads: Reads) -> list[Suspect]:
    out: list[Suspect] = []
    for h in reads.progress.held:
        read = h.proc.latest
        frames = read.primary.frames if read is not None else ()
        out.append(
            suspect(
                REQUEST_PATH,
                h.proc.role or Role.ROUTER,
                h.describe(),
                h.proc,
                weight=STRONG,
                stage=Stage.ROLLOUT_DISPATCH,
                evidence=tuple(f.where for f in frames[:8]),
            )
        )
    return out


def evidence(reads: Reads, suspects: Sequence[Suspect]) -> list[Evidence]:
    return [
        Evidence(REQUEST_PATH, "request-path-held", h.describe(), 2) for h in reads.progress.held
    ]


ANALYSIS = SourceAnalysis(
    name="request_path",
    gives=(REQUEST_PATH,),
    holds=(REQUEST_PATH,),
    progress=progress,
    suspects=suspects,
    evidence=evidence,
    messages=MESSAGES,
)

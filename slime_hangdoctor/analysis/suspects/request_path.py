"""A hop of the rollout's request path that holds the job's requests (analysis/request_path.py):
the culprit, even while the engines still decode what passed it before (miles PR#1602)."""

from __future__ import annotations

from collections.abc import Sequence

from slime_hangdoctor.analysis.suspects.suspect import (
    STRONG,
    Evidence,
    Suspect,
    SuspectInputs,
    suspect,
)
from slime_hangdoctor.verdict import Role, Stage

MESSAGES = {
    "request-path-held": (
        "A process on the rollout's request path holds the job's requests: CPU-bound in one "
        "frame at both samples while requests pile up at it (what the engines still decode is "
        "not the job's progress)"
    ),
}


def suspects(reads: SuspectInputs) -> list[Suspect]:
    out: list[Suspect] = []
    for h in reads.progress.held:
        read = h.proc.latest
        frames = read.primary.frames if read is not None else ()
        out.append(
            suspect(
                "request_path",
                h.proc.role or Role.ROUTER,
                h.describe(),
                h.proc,
                weight=STRONG,
                stage=Stage.ROLLOUT_DISPATCH,
                evidence=tuple(f.where for f in frames[:8]),
            )
        )
    return out


def evidence(reads: SuspectInputs, suspects: Sequence[Suspect]) -> list[Evidence]:
    return [
        Evidence("request_path", "request-path-held", h.describe(), 2) for h in reads.progress.held
    ]

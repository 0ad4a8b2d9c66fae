"""The job as a whole: every slime process waits and none works, or a source that had two samples
to compare did not move (each part's `progress` says what it compared): reasons to believe the job
hangs, whoever is to blame."""

from __future__ import annotations

from collections.abc import Sequence

from slime_hangdoctor.analysis.readers.nccl_ras import RAS
from slime_hangdoctor.analysis.readers.pyspy import STACKS
from slime_hangdoctor.analysis.readers.sglang_http import SGLANG
from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.analysis.source_analysis import Evidence, Reads, SourceAnalysis, Suspect

MESSAGES = {
    "all-waiting": "Every slime process is waiting; none is working",
    "no-progress": "Nothing moved between the two samples",
}


def _all_waiting(reads: Reads) -> list[Evidence]:
    world, progress = reads.world, reads.progress
    procs = [p for p in world.procs if p.role is not None and p.latest is not None]
    if len(procs) < 2 or progress.moving:
        return []
    for p in procs:
        read = p.latest
        if read is None or read.cpu_busy:
            return []
    return [
        Evidence(
            STACKS,
            "all-waiting",
            "every slime process is waiting: "
            + "; ".join(
                f"{p.label}: {p.latest.describe() if p.latest else '?'}" for p in procs[:6]
            ),
            1,
        )
    ]


def evidence(reads: Reads, suspects: Sequence[Suspect]) -> list[Evidence]:
    return _all_waiting(reads) + _frozen(reads)


def _frozen(reads: Reads) -> list[Evidence]:
    progress = reads.progress
    by_source: dict[Source, list[str]] = {}
    for s in progress.frozen:
        by_source.setdefault(s.source, []).append(s.text())
    return [
        Evidence(src, "no-progress", f"{src}: " + "; ".join(texts[:3]), 1)
        for src, texts in by_source.items()
    ]


ANALYSIS = SourceAnalysis(
    name="progress",
    gives=(SGLANG, RAS, STACKS),  # the parts whose progress compares samples and can stay frozen
    evidence=evidence,
    messages=MESSAGES,
)

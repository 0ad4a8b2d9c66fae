"""Progress compared across the samples: a source that had two samples and did not move."""

from __future__ import annotations

from collections.abc import Sequence

from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.analysis.suspects.suspect import Evidence, Suspect, SuspectInputs

MESSAGES = {
    "no-progress": "Nothing moved between the two samples",
}


def evidence(reads: SuspectInputs, suspects: Sequence[Suspect]) -> list[Evidence]:
    progress = reads.progress
    by_source: dict[Source, list[str]] = {}
    for s in progress.frozen:
        by_source.setdefault(s.source, []).append(s.text())
    return [
        Evidence(src, "no-progress", f"{src}: " + "; ".join(texts[:3]), 1)
        for src, texts in by_source.items()
    ]

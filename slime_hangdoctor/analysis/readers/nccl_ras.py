"""The typed name of NCCL RAS's evidence (analysis/source.py), here because two parts speak in it:
parts/ras.py (what RAS reports) and parts/progress.py (a frozen RAS count among the signals that
compare samples); and the ranks behind in each collective's launch count (`behind_by_op`), which
parts/ras.py and parts/stacks.py (the sides of a collective mismatch) read. A part imports no
other part (docs/architecture.md, "The analysis wing")."""

from __future__ import annotations

from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.parsers.nccl_ras import RasCommunicator, RasRank

RAS = Source(
    "ras"
)  # NCCL RAS: the communicators' ranks and collective counts (parsers/nccl_ras.py)


def behind_by_op(comm: RasCommunicator) -> dict[str, tuple[list[RasRank], int]]:
    """Per collective whose launch counts differ: the ranks behind, and the top count."""
    out: dict[str, tuple[list[RasRank], int]] = {}
    for op in sorted({op for r in comm.ranks for op in r.collective_counts}):
        counts = [(r, r.collective_counts.get(op)) for r in comm.ranks if not r.missing]
        values = [c for _, c in counts if c is not None]
        if len(values) < 2 or min(values) == max(values):
            continue
        top = max(values)
        out[op] = ([r for r, c in counts if c is not None and c < top], top)
    return out

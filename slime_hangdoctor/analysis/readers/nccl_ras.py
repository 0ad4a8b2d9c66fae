"""The typed name of NCCL RAS's evidence (analysis/source.py), here because two parts speak in it:
parts/ras.py (what RAS reports) and parts/progress.py (a frozen RAS count among the signals that
compare samples). A part imports no other part (docs/architecture.md, "The analysis wing")."""

from __future__ import annotations

from slime_hangdoctor.analysis.source import Source

RAS = Source(
    "ras"
)  # NCCL RAS: the communicators' ranks and collective counts (parsers/nccl_ras.py)

"""Pure analysis: Snapshot + Topology -> Diagnosis (see `decide.diagnose`)."""

from __future__ import annotations

from slime_hangdoctor.analysis.decide import diagnose

__all__ = ["diagnose"]

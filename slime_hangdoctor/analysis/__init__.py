"""Pure analysis: Snapshot + Topology -> Diagnosis (see `diagnosis.diagnose`)."""

from __future__ import annotations

from slime_hangdoctor.analysis.diagnosis import diagnose

__all__ = ["diagnose"]

"""What Ray's state adds to a verdict beside its suspects (the Ray state API's source analysis)."""

from __future__ import annotations

from slime_hangdoctor.analysis.source_analysis import SourceAnalysis
from slime_hangdoctor.analysis.suspects import ray_findings

ANALYSIS = SourceAnalysis(findings=lambda r: ray_findings(r.world, r.engines))

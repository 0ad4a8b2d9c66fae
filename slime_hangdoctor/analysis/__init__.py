"""Pure analysis: Snapshot + Topology -> Diagnosis. No I/O, no clocks; it reads the Snapshot only.

`diagnosis.diagnose` is the entry point. Its passes, in order:

1. `world.build_world`: one `Proc` per slime process, with its stack reads (`stacks.py`, whose
   frames `signatures.py` maps to a block and a stage) and its GPU (`gpu.py`).
2. `engines.read_engines`: each SGLang engine's state from its HTTP answers and processes.
3. `progress.assess`: what moved between the two samples (progress) and what did not (frozen),
   with each source's own progress signals (`SourceAnalysis.progress`).
4. `suspects.find_suspects`: every suspect finder of `suspects.SUSPECT_FINDERS`, then each source's
   (`SourceAnalysis.suspects`), names who the others wait for; `suspects.merge.merge` joins
   suspects by identity.
5. `suspects.hang_evidence`: every finder of `suspects.EVIDENCE_FINDERS`, then each source's, says
   whether the job hangs.
6. In `diagnosis`: the status, then (when hung) the stage and the culprits; `rules.known_causes`
   (the KNOWN_CAUSES table) links known slime/SGLang causes; then confidence, the findings (each
   source's, `source_analysis.Section`), next steps (`rules.py` and each source's) and blind spots;
   the per-process rows and the deciding stack excerpt.
"""

from __future__ import annotations

from slime_hangdoctor.analysis.diagnosis import diagnose

__all__ = ["diagnose"]

"""Pure analysis: Snapshot + Topology -> Diagnosis. No I/O, no clocks; it reads the Snapshot only.

`diagnosis.diagnose` is the entry point. Inside, four layers, each importing only those below it
(tests/unit/test_import_layers.py):

1. The readers: `world.build_world` (one `Proc` per slime process, with its stack reads from
   `readers/pyspy.py`, whose frames `signatures/` maps to a block and a stage, and its GPU from
   `readers/nvml.py`), `readers/sglang_http.read_engines` (each SGLang engine's state),
   `readers/proof` (the kinds of proof of work and how the parts' readings combine), and the
   shared views (`network`, `actor_queues`, `services`, and in `readers/` what more than one part
   reads: `hold`, `proxies`, `cuda_spin`, `fr_groups`, `gone_routers`).
2. The contract of a part (`source_analysis.SourceAnalysis`: suspects, evidence, progress, stage,
   known causes, findings, next steps) and `merge` (suspects joined by identity).
3. The parts (`parts/`): one module (or package) per typed source and per rule that reads several
   sources, reached through one list, `sources.ENTRIES`, in its order. A part imports no other
   part; what two share is a reader.
4. What composes them, reaching the parts through the contract's hooks only: `diagnosis` (status, stage, culprits, confidence, findings, rows) and
   `advice` (the culprits' and the general next steps, the blind spots).

`diagnose` runs, in order: the readers; every part's `progress` (what moved between the samples);
`suspects` (merged by identity) and `evidence`; the status, then (when hung) the stage and the
culprits; every part's known `causes`; the confidence, the findings (culprits, evidence, causes,
the parts' state, progress, the logs), the next steps and blind spots; the per-process rows and
the deciding stack excerpt.

A fifth module stands apart: `counters` (the verdict of the watchdog's counters-only look), which
the package imports nothing else for: the watchdog loads it alone, without the analysis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slime_hangdoctor.analysis.diagnosis import diagnose

__all__ = ["diagnose"]


def __getattr__(name: str) -> Any:
    """`diagnose`, imported when first asked for: importing the package (for `counters`) loads
    nothing of the analysis."""
    if name == "diagnose":
        from slime_hangdoctor.analysis.diagnosis import diagnose

        return diagnose
    raise AttributeError(name)

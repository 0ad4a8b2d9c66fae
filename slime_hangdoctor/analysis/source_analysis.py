"""What a source adds to a diagnosis beside its suspects: `SourceAnalysis`, one per source, as
`ANALYSIS` in the module its `SourceSpec.analysis` names. `diagnose()` runs them in the sources'
order (sources.SPECS).

A verdict's findings read: the culprits, the hang evidence, the known causes, then each source's
findings about the job's live state (`Section.STATE`), what moved between the samples (the
progress findings), and last what the logs say (`Section.LOGS`: logs explain, live data decides).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from slime_hangdoctor.analysis.engines import EngineRead
from slime_hangdoctor.analysis.progress import Signal
from slime_hangdoctor.analysis.world import World
from slime_hangdoctor.sources import SPECS
from slime_hangdoctor.verdict import Finding, Stage, Status

if TYPE_CHECKING:  # types only: the suspect finders' package runs the sources' finders below
    from slime_hangdoctor.analysis.suspects.suspect import Evidence, Suspect, SuspectInputs


class Section(Enum):
    STATE = "state"  # what the job's processes, engines and cluster show now
    LOGS = "logs"  # what the logs say (after the progress findings)


@dataclass(frozen=True)
class Reading:
    """What a source's findings and next steps may read: the world, the engines, and the verdict
    decided from the live evidence."""

    world: World
    engines: tuple[EngineRead, ...]
    status: Status
    stage: Stage  # the stage live evidence found (NONE unless hung, UNKNOWN when none did)


@dataclass(frozen=True)
class SourceAnalysis:
    """A source's part of the diagnosis; every hook is optional."""

    # facts that show work between the samples (they make a job progressing)
    progress: Callable[[World], list[Signal]] | None = None
    findings: Callable[[Reading], list[Finding]] | None = None
    section: Section = Section.STATE
    next_steps: Callable[[Reading], list[str]] | None = None
    # a second stage signal, used only where the live evidence named no stage
    stage: Callable[[World], Stage | None] | None = None
    # who the others wait for, by this source (run after the finders of suspects.SUSPECT_FINDERS,
    # which also read what no one source shows: chains of waits, the rollout's event loop)
    suspects: Callable[[SuspectInputs], list[Suspect]] | None = None
    # reasons to believe the job hangs, by this source, and the headline of each finding id
    evidence: Callable[[SuspectInputs, Sequence[Suspect]], list[Evidence]] | None = None
    messages: Mapping[str, str] = field(default_factory=dict)


@functools.cache
def source_analyses() -> tuple[SourceAnalysis, ...]:
    """The ANALYSIS of every source whose spec names one, in the sources' order (sources.SPECS)."""
    found: list[SourceAnalysis] = []
    for spec in SPECS:
        if spec.analysis is not None:
            if not spec.analysis.startswith("slime_hangdoctor.analysis."):
                raise ValueError(f"{spec.name}: its analysis must be a module of analysis/")
            analysis = importlib.import_module(spec.analysis).ANALYSIS
            if not isinstance(analysis, SourceAnalysis):
                raise TypeError(f"{spec.analysis}.ANALYSIS is not a SourceAnalysis")
            found.append(analysis)
    return tuple(found)

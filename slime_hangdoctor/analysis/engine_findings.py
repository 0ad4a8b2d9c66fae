"""What the engines' answers add to a verdict beside their suspects: an engine hung while the job
progresses elsewhere, a paused or holding engine, a `/server_info` that was poisoned or skipped."""

from __future__ import annotations

from slime_hangdoctor.analysis.engines import (
    HUNG_ENGINE_STATES,
    EngineRead,
    EngineState,
)
from slime_hangdoctor.analysis.source_analysis import SourceAnalysis
from slime_hangdoctor.verdict import Finding, Severity, Status


def engine_findings(engines: tuple[EngineRead, ...], status: Status) -> list[Finding]:
    out: list[Finding] = []
    if status is Status.PROGRESSING:
        out.extend(
            Finding(
                "engine-" + e.state.value,
                Severity.WARNING,
                f"engine {e.url} is {e.state.value} while the job progresses elsewhere",
                e.evidence[:4],
            )
            for e in engines
            if e.state in HUNG_ENGINE_STATES
        )
    out.extend(
        Finding(
            "engine-paused",
            Severity.INFO,
            f"engine {e.url} is paused (generation held before its scheduler)",
            e.evidence[:4],
        )
        for e in engines
        if e.state is EngineState.PAUSED
    )
    out.extend(
        Finding(
            "engine-held",
            Severity.INFO,
            f"engine {e.url} holds requests between its HTTP layer and its scheduler (not "
            "paused by the evidence)",
            e.evidence[:4],
        )
        for e in engines
        if e.state is EngineState.HELD
    )
    out.extend(
        Finding("engine-server-info-poisoned", Severity.INFO, note, ())
        for e in engines
        for note in e.notes
    )
    out.extend(
        Finding("engine-server-info-probe", Severity.INFO, e.server_info_calls, ())
        for e in engines
        if e.server_info_calls and e.server_info_skipped
    )
    return out


ANALYSIS = SourceAnalysis(findings=lambda r: engine_findings(r.engines, r.status))

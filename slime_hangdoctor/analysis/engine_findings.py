"""What the engines' answers add to a verdict beside their suspects: an engine hung while the job
progresses elsewhere, a paused or holding engine, a `/server_info` that was poisoned or skipped,
and a URL a router lists that is not one of the job's engines."""

from __future__ import annotations

from slime_hangdoctor.analysis.engines import (
    HUNG_ENGINE_STATES,
    EngineRead,
    EngineState,
    router_entry,
)
from slime_hangdoctor.analysis.source_analysis import Reading, SourceAnalysis
from slime_hangdoctor.analysis.world import World
from slime_hangdoctor.http_facts import SglangMetrics
from slime_hangdoctor.parsers.sglang import counter_rises
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


def listed_findings(world: World) -> list[Finding]:
    """Each URL a router lists that is not one of the job's engines (`Topology.listed`: no process
    of the job serves it, the job's arguments and the user do not name it). Anyone who reaches
    the router's worker registration can add one: it was probed without the API key, and nothing
    it answers weighs on the verdict; what it answered is told, and the router's own count of
    requests in flight to it (the job's requests sent there are lost to the job)."""
    out: list[Finding] = []
    for engine in world.topology.listed:
        url = engine.url.rstrip("/")
        answers = [  # "engine": a bundle written before the collector marked them
            o
            for o in world.snapshot.http
            if o.kind in ("listed", "engine") and o.answer.url.rstrip("/") == url
        ]
        evidence: list[str] = []
        ok = sorted({o.answer.path for o in answers if o.answer.status == 200})
        if ok:
            evidence.append(f"it answered {', '.join(ok)}")
        not_ok = {
            f"GET {o.answer.path}: {o.answer.error or f'HTTP {o.answer.status}'}"
            for o in answers
            if o.answer.status != 200 and o.answer.path not in ok
        }
        evidence.extend(sorted(not_ok)[:3])
        metrics = {o.sample: o.parsed for o in answers if isinstance(o.parsed, SglangMetrics)}
        if len(metrics) >= 2:
            rises = counter_rises(metrics[min(metrics)], metrics[max(metrics)])
            if rises:
                evidence.append(f"its counters rose ({', '.join(rises)}): not the job's progress")
        entry = router_entry(world, url)
        if entry is not None and entry.load:
            evidence.append(f"the router counts {entry.load} requests in flight to it")
        out.append(
            Finding(
                "router-lists-unknown-engine",
                Severity.WARNING,
                f"the router lists {url}, which is not one of the job's engines (no process of "
                "the job serves it, and neither the job's arguments nor --sglang-url name it): "
                "probed without the API key, left out of the verdict",
                tuple(evidence[:5]),
            )
        )
    return out


def _findings(r: Reading) -> list[Finding]:
    return engine_findings(r.engines, r.status) + listed_findings(r.world)


ANALYSIS = SourceAnalysis(findings=_findings)

"""Prometheus textfile for node-exporter's textfile collector (written atomically)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from slime_hangdoctor.verdict import Status, Verdict
from slime_hangdoctor.watchdog.decide import CheckDecision


def write_prom_file(
    path: Path,
    verdict: Verdict,
    decision: CheckDecision,
    probe_outcomes: Mapping[tuple[str, str], int],
    *,
    now: float,
    duration_s: float,
) -> None:
    """`probe_outcomes`: (source, outcome) -> how many of the run's probes ended so."""
    from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

    reg = CollectorRegistry()
    Gauge(
        "slime_hangdoctor_seconds_since_progress",
        "Seconds since the slime job last made progress (0 while progressing).",
        registry=reg,
    ).set(decision.stalled_for_s)
    stalled = Gauge(
        "slime_hangdoctor_stalled",
        "1 when the job is stalled past --stall-after, with the blocked stage.",
        ["stage"],
        registry=reg,
    )
    stalled.labels(stage=verdict.stage.value).set(1 if decision.exit_code == 2 else 0)
    status = Gauge(
        "slime_hangdoctor_status", "The verdict's status (one-hot).", ["status"], registry=reg
    )
    for s in Status:
        status.labels(status=s.value).set(1 if verdict.status is s else 0)
    Gauge(
        "slime_hangdoctor_exit_code", "The check's exit code (0 OK .. 3 UNKNOWN).", registry=reg
    ).set(int(decision.exit_code))
    culprit = Gauge(
        "slime_hangdoctor_culprit_info",
        "The process the others wait for (1 per culprit).",
        ["role", "node_ip", "pid", "rank", "engine_url"],
        registry=reg,
    )
    for c in verdict.culprits:
        culprit.labels(
            role=c.role.value,
            node_ip=c.node_ip or "",
            pid=str(c.pid or ""),
            rank="" if c.rank is None else str(c.rank),
            engine_url=c.engine_url or "",
        ).set(1)
    outcomes = Gauge(
        "slime_hangdoctor_probe_outcomes",
        "Probes of the last run by source and outcome.",
        ["source", "outcome"],
        registry=reg,
    )
    for (source, outcome), n in probe_outcomes.items():
        outcomes.labels(source=source, outcome=outcome).set(n)
    Gauge(
        "slime_hangdoctor_last_run_timestamp_seconds", "When the last check ran.", registry=reg
    ).set(now)
    Gauge(
        "slime_hangdoctor_run_duration_seconds", "How long the last check took.", registry=reg
    ).set(duration_s)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), reg)

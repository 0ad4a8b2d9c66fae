"""The run's timeline for the report: the two samples, each source's probes, the work counters.

Pure: reads the snapshot's manifest (what each probe did and when) and its engines' `/metrics`
answers. It decides nothing: the verdict's progress findings say what the counters mean."""

from __future__ import annotations

from slime_hangdoctor.parsers.sglang import HTTP_ANSWERS, WORK_COUNTERS, HttpPeer, SglangMetrics
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.verdict import CounterMove, ProbeSpan, Timeline

__all__ = ["timeline"]


def timeline(snapshot: Snapshot) -> Timeline:
    manifest = snapshot.manifest
    probes = manifest.probes
    starts = [p.started_at for p in probes if p.started_at > 0]
    t0 = min([*starts, *manifest.sample_times], default=manifest.created_at)
    spans: dict[tuple[str, int | None], list[tuple[float, float, str]]] = {}
    for p in probes:
        if p.started_at <= 0:
            continue
        start = p.started_at - t0
        spans.setdefault((p.source, p.sample), []).append(
            (start, start + max(0.0, p.elapsed_s), p.outcome.value)
        )
    out = []
    for (source, sample), runs in sorted(spans.items(), key=lambda kv: min(r[0] for r in kv[1])):
        counts: dict[str, int] = {}
        for _, _, outcome in runs:
            counts[outcome] = counts.get(outcome, 0) + 1
        out.append(
            ProbeSpan(
                source,
                sample,
                min(r[0] for r in runs),
                max(r[1] for r in runs),
                tuple(sorted(counts.items())),
            )
        )
    return Timeline(tuple(t - t0 for t in manifest.sample_times), tuple(out), _counters(snapshot))


def _counters(snapshot: Snapshot) -> tuple[CounterMove, ...]:
    by_url: dict[str, dict[int, SglangMetrics]] = {}
    for obs in snapshot.joined(HTTP_ANSWERS):
        if obs.kind is HttpPeer.ENGINE and isinstance(obs.parsed, SglangMetrics):
            by_url.setdefault(obs.answer.url, {})[obs.sample] = obs.parsed
    out: list[CounterMove] = []
    for url, samples in sorted(by_url.items()):
        if len(samples) < 2:
            continue
        first, last = samples[min(samples)], samples[max(samples)]
        for name, words in WORK_COUNTERS:
            before, after = getattr(first, name), getattr(last, name)
            if before is not None and after is not None:
                out.append(CounterMove(f"engine {url} {words}", float(before), float(after)))
    return tuple(out)

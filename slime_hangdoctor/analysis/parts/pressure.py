"""A node whose processes stall on memory or storage (Linux PSI, parsers/pressure.py).

Between the two samples, `total` tells how much of the window tasks lost waiting: a node that
thrashes (memory) or waits on its disks (io) makes every stage slow or stuck, whatever the stacks
say. CPU pressure is left out: a busy node is not a hang. The finding is a warning beside the
verdict (it names no culprit; the node's processes do)."""

from __future__ import annotations

from slime_hangdoctor.analysis.source_analysis import Reading, SourceAnalysis
from slime_hangdoctor.parsers.pressure import SPEC, NodePressure
from slime_hangdoctor.source_spec import Observed
from slime_hangdoctor.verdict import Finding, Severity

RESOURCES = ("memory", "io")
SOME_SHARE = 0.25  # some task stalled a quarter of the window
FULL_SHARE = 0.10  # every non-idle task stalled a tenth of the window


def stalled(
    first: Observed[NodePressure], last: Observed[NodePressure], window_s: float
) -> list[str]:
    """What stalled on one node between two samples: one line per resource over its share."""
    seconds = last.at - first.at if last.at > first.at else window_s
    if seconds <= 0:
        return []
    out: list[str] = []
    for resource in RESOURCES:
        a, b = first.fact.of(resource), last.fact.of(resource)
        if a is None or b is None:
            continue
        some = (b.some.total_us - a.some.total_us) / 1e6 / seconds
        full = (
            (b.full.total_us - a.full.total_us) / 1e6 / seconds
            if a.full is not None and b.full is not None
            else 0.0
        )
        if some >= SOME_SHARE or full >= FULL_SHARE:
            out.append(
                f"{resource}: some task stalled {some:.0%} and every task {full:.0%} of "
                f"{seconds:.1f} s (PSI; avg10 now {b.some.avg10:.1f}% / "
                f"{b.full.avg10 if b.full else 0.0:.1f}%)"
            )
    return out


def pressure_findings(reading: Reading) -> list[Finding]:
    snap = reading.world.snapshot
    by_node: dict[str | None, list[Observed[NodePressure]]] = {}
    for obs in snap.facts(SPEC):
        by_node.setdefault(obs.node_ip, []).append(obs)
    out: list[Finding] = []
    for node, seen in sorted(by_node.items(), key=lambda kv: kv[0] or ""):
        seen.sort(key=lambda o: (o.sample, o.at))
        if len(seen) < 2 or seen[0].sample == seen[-1].sample:
            continue
        lines = stalled(seen[0], seen[-1], snap.window_s)
        if lines:
            out.append(
                Finding(
                    "node-pressure",
                    Severity.WARNING,
                    f"node {node or 'this node'} stalls on memory or storage: every process there "
                    "is slowed, whatever its stack shows",
                    tuple(lines),
                )
            )
    return out


ANALYSIS = SourceAnalysis(name="pressure", findings=pressure_findings)

"""Where the time of one run went, read from its bundle's manifest (per-probe started_at/elapsed_s).

Phases, in the order they happen (seconds):

- ``startup``: the CLI process exists -> the bundle writer is created (interpreter, imports, options);
- ``discovery``: -> the first py-spy dump starts (find the cluster, Ray state, process scan, roles);
- ``sample0``: the first sample's probes (stacks, RAS, engines), overlapping the window;
- ``window_wait``: nothing in flight, waiting for the second sample;
- ``sample1``: second sample start -> its last probe ends (the critical path after the window);
- ``finish``: -> the manifest is written;
- ``analysis_render_exit``: -> the process has exited (parse, diagnose, render, clean up);
  with the verdict's ``elapsed_s`` (a ``--json`` run: the time from the run's start to its
  verdict), split into ``analysis`` (-> the verdict, the bundle's archive with ``--out``) and
  ``render_exit`` (-> the process has exited: the report printed, the interpreter gone).

Also ``first_probe``: the CLI process exists -> its first probe starts (a Ray state read, or the
first dump with ``--local``): everything a run does before it looks at the job.

Per probe kind and sample: how many, the span (first start -> last end), the sum and the max of
their durations (spans overlap: probes run concurrently).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any


def load_manifest(bundle: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((bundle / "manifest.json").read_text())
    return data


def _end(p: dict[str, Any]) -> float:
    return float(p["started_at"]) + float(p.get("elapsed_s") or 0.0)


def probe_kinds(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """`source` (and sample) -> count, span_s, sum_s, max_s, outcomes."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in manifest["probes"]:
        if p.get("started_at") is None:
            continue
        sample = p.get("sample")
        key = p["source"] if sample is None else f"{p['source']}[s{sample}]"
        groups[key].append(p)
    out: dict[str, dict[str, Any]] = {}
    for key, probes in sorted(groups.items()):
        start = min(float(p["started_at"]) for p in probes)
        end = max(_end(p) for p in probes)
        durations = [float(p.get("elapsed_s") or 0.0) for p in probes]
        outcomes: dict[str, int] = defaultdict(int)
        for p in probes:
            outcomes[p["outcome"]] += 1
        out[key] = {
            "count": len(probes),
            "span_s": round(end - start, 3),
            "sum_s": round(sum(durations), 3),
            "max_s": round(max(durations), 3),
            "outcomes": dict(outcomes),
        }
    return out


def stack_targets(manifest: dict[str, Any], sample: int = 0) -> int:
    """How many processes got a py-spy dump in `sample` (the slime processes the run found)."""
    return sum(1 for p in manifest["probes"] if p["source"] == "pyspy" and p["sample"] == sample)


def stack_span(manifest: dict[str, Any], sample: int) -> float:
    """Wall time of one sample's stack collection: first dump start -> last dump end."""
    dumps = [p for p in manifest["probes"] if p["source"] == "pyspy" and p["sample"] == sample]
    if not dumps:
        return 0.0
    return max(_end(p) for p in dumps) - min(float(p["started_at"]) for p in dumps)


def phases(
    manifest: dict[str, Any],
    *,
    launched_at: float,
    exited_at: float,
    verdict_elapsed_s: float | None = None,
) -> dict[str, float]:
    """The phases of the module docstring, in seconds (epoch times in, durations out)."""
    created = float(manifest["created_at"])
    finished = float(manifest["finished_at"])
    times = [float(t) for t in manifest.get("sample_times") or []]
    probes = [p for p in manifest["probes"] if (p.get("started_at") or 0) > 0]
    s0 = [p for p in probes if p.get("sample") == 0]
    s1 = [p for p in probes if p.get("sample") == 1]
    first_stack = min(
        (float(p["started_at"]) for p in s0 if p["source"] == "pyspy"),
        default=times[0] if times else created,
    )
    s0_end = max((_end(p) for p in s0), default=first_stack)
    s1_start = times[1] if len(times) > 1 else s0_end
    s1_end = max((_end(p) for p in s1), default=s1_start)
    first_probe = min((float(p["started_at"]) for p in probes), default=created)
    split: dict[str, float] = {}
    if verdict_elapsed_s is not None:
        verdict_at = max(finished, created + verdict_elapsed_s)
        split = {
            "analysis": round(verdict_at - finished, 3),
            "render_exit": round(exited_at - verdict_at, 3),
        }
    return {
        "first_probe": round(first_probe - launched_at, 3),
        **split,
        "startup": round(created - launched_at, 3),
        "discovery": round(first_stack - created, 3),
        "sample0": round(s0_end - first_stack, 3),
        "window_wait": round(max(0.0, s1_start - s0_end), 3),
        "sample1": round(s1_end - s1_start, 3),
        "finish": round(finished - s1_end, 3),
        "analysis_render_exit": round(exited_at - finished, 3),
        "total": round(exited_at - launched_at, 3),
    }

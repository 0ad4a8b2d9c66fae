"""Progress markers: values that move whenever a slime job does real work. Pure.

A cron `check` keeps the markers of its last run in the state file; any marker that changed since then
means the job made progress in between, even if each run's own short window saw nothing move.
Health-check and metrics polling move none of these.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slime_hangdoctor.parsers.sglang import SglangMetrics
    from slime_hangdoctor.snapshot import Snapshot
    from slime_hangdoctor.topology import Topology

# The readers of a snapshot are imported where they are used: the watchdog's decision and its
# counters-only look need the names and the comparisons below, not the snapshot's whole model.
Markers = dict[str, str]
# A process on the rollout's request path that is CPU-bound over a window may hold the job's
# requests (analysis/parts/request_path/hops.py decides; the watchdog's counters-only look, which reads only
# CPU times and states, then leaves the answer to the analysed look)
REQUEST_PATH_CPU_BOUND = 0.8


def cpu_bound(cpu_s: float, window_s: float, runnable: bool, wanted_s: float | None = None) -> bool:
    """CPU-bound over a window: it used REQUEST_PATH_CPU_BOUND of a core; or its main thread was
    on a CPU or waiting only for one that share of the window (`wanted_s`, /proc/<pid>/schedstat:
    on a node whose cores are all taken it gets less than a core); or, where that was not read, it
    was runnable (state R) at every look."""
    if window_s <= 0:
        return runnable
    if cpu_s >= REQUEST_PATH_CPU_BOUND * window_s:
        return True
    if wanted_s is not None:
        return wanted_s >= REQUEST_PATH_CPU_BOUND * window_s
    return runnable


def progress_markers(snapshot: Snapshot, topology: Topology) -> Markers:
    """Marker name -> value (as text) for everything in the snapshot that only moves with work."""
    markers: Markers = {}
    _engine_counters(snapshot, markers)
    _ray_tasks(snapshot, topology, markers)
    _ras_counts(snapshot, markers)
    _flight_cursors(snapshot, markers)
    _gpu_counters(snapshot, markers)
    _stacks(snapshot, topology, markers)
    return markers


def changed_markers(before: Markers, after: Markers) -> list[str]:
    """Names of markers present in both runs whose value differs."""
    return sorted(k for k, v in after.items() if k in before and before[k] != v)


def work_markers(markers: Markers) -> Markers:
    """The markers that only move with work (token counters, new Ray tasks, collectives, NVLink
    traffic): not the stack digests, which also change while a CPU-hot loop spins in place."""
    return {k: v for k, v in markers.items() if not k.startswith("stack:")}


def engine_markers(url: str, metrics: SglangMetrics) -> Markers:
    """One engine's work counters as markers (`sglang:<url>:<counter>`)."""
    from slime_hangdoctor.parsers.sglang import WORK_COUNTERS

    out: Markers = {}
    for name, _ in WORK_COUNTERS:
        value = getattr(metrics, name)
        if value is not None:
            out[f"sglang:{url}:{name}"] = repr(float(value))
    return out


def _engine_counters(snapshot: Snapshot, out: Markers) -> None:
    from slime_hangdoctor.parsers.sglang import HTTP_ANSWERS, SglangMetrics

    latest: dict[str, SglangMetrics] = {}
    for obs in sorted(snapshot.joined(HTTP_ANSWERS), key=lambda o: o.sample):
        if isinstance(obs.parsed, SglangMetrics):
            latest[obs.answer.url] = obs.parsed
    for url, m in latest.items():
        out.update(engine_markers(url, m))


def _ray_tasks(snapshot: Snapshot, topology: Topology, out: Markers) -> None:
    from slime_hangdoctor.parsers.ray_state import RAY_STATE, TASK_RUNNING

    slime_actors = {m.actor_id for m in topology.members if m.actor_id}
    ids = sorted(
        t.task_id
        for t in snapshot.joined(RAY_STATE).tasks
        if t.actor_id in slime_actors and t.state == TASK_RUNNING
    )
    if snapshot.joined(RAY_STATE).seen:
        out["ray:running_slime_tasks"] = _digest(ids)


def _ras_counts(snapshot: Snapshot, out: Markers) -> None:
    from slime_hangdoctor.parsers.nccl_ras import SPEC as RAS

    for obs in snapshot.facts(RAS):
        for comm in obs.fact.communicators:
            total = sum(sum(r.collective_counts.values()) for r in comm.ranks)
            out[f"ras:{obs.node_ip}:{comm.hash}"] = str(total)


def _flight_cursors(snapshot: Snapshot, out: Markers) -> None:
    from slime_hangdoctor.parsers.flight_recorder import SPEC as FLIGHT_RECORDER

    for obs in snapshot.facts(FLIGHT_RECORDER):
        for pg, status in obs.fact.pg_status.items():
            value = status.get("last_completed_collective")
            if value is not None:
                out[f"fr:rank{obs.fact.rank}:pg{pg}"] = str(value)


def _gpu_counters(snapshot: Snapshot, out: Markers) -> None:
    from slime_hangdoctor.parsers.nvml import GPU_SERIES

    for obs in snapshot.joined(GPU_SERIES):
        if not obs.series.samples:
            continue
        for g in obs.series.samples[-1].gpus:
            if g.nvlink_tx is not None:
                out[f"gpu:{obs.node_ip}:{g.index}:nvlink_tx"] = str(g.nvlink_tx)


def _stacks(snapshot: Snapshot, topology: Topology, out: Markers) -> None:
    from slime_hangdoctor.parsers.pyspy import ALL_STACKS

    slime_pids = {(m.node_ip, m.pid) for m in topology.members}
    latest: dict[tuple[str | None, int], str] = {}
    for obs in sorted(snapshot.joined(ALL_STACKS), key=lambda s: s.sample):
        if (obs.node_ip, obs.pid) not in slime_pids and not any(
            p == obs.pid for _, p in slime_pids
        ):
            continue
        main = [t for t in obs.stack.threads if t.name in ("MainThread", None)] or list(
            obs.stack.threads[:1]
        )
        frames = [f"{f.filename}:{f.name}" for t in main for f in t.frames if not f.native]
        latest[(obs.node_ip, obs.pid)] = _digest(frames)
    for (node, pid), digest in latest.items():
        out[f"stack:{node}:{pid}"] = digest


def _digest(items: list[str]) -> str:
    return hashlib.sha256("\n".join(items).encode()).hexdigest()[:16]

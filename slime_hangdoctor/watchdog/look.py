"""The watchdog's analysed looks: without stacks first where they cannot matter, else the full one.

`look` is what a `check` run takes when its counters-only look (watchdog/counter_look.py) did not
answer: a collection and the analysis, as `attach` takes them, with the stacks only where they can
matter (see `look`). It also says what the next runs' counters-only look may read
(`counter_plan`)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from slime_hangdoctor.analysis.counters import STACKS_SKIPPED
from slime_hangdoctor.bundle import Bundle, BundleWriter
from slime_hangdoctor.collect.node import parse_cache
from slime_hangdoctor.collect.options import CollectOptions
from slime_hangdoctor.load import load_snapshot
from slime_hangdoctor.markers import Markers, changed_markers, progress_markers, work_markers
from slime_hangdoctor.parsers.processes import SPEC as PROCESSES
from slime_hangdoctor.parsers.processes import STATUS_ZOMBIE
from slime_hangdoctor.parsers.sglang import HTTP_ANSWERS, HttpPeer, SglangMetrics, counter_rises
from slime_hangdoctor.pipeline import Analysed, attach
from slime_hangdoctor.topology import MemberKind, build_topology
from slime_hangdoctor.verdict import (
    Diagnosis,
    Finding,
    Severity,
    Status,
    verdict_from_json,
)
from slime_hangdoctor.watchdog.state import CounterPlan, StallLook, WatchState

# During a stall already alerted for, a run in which nothing moved carries the verdict of the
# stall's last full look for this long after it; then it takes stacks again.
CARRY_FOR_S = 600.0
# The watchdog reads NVML at the window's start, middle and end (attach: every 0.5 s). One reading
# costs ~2.5-5 ms of CPU per GPU on an H200 (docs/gpu.md): a cron run on an 8-GPU node pays it
# every minute.
NVML_INTERVAL_S = 1.0


@dataclass(frozen=True)
class Look:
    analysed: Analysed
    markers: Markers
    full: bool  # stacks were taken (the verdict is judged on them)
    carried: StallLook | None = None  # the stall look whose verdict this run carries forward

    def stall_look(self, now: float) -> StallLook | None:
        """What the next run may carry: this run's own full look at a stall, or the one it carried."""
        if self.carried is not None:
            return self.carried
        verdict = self.analysed.diagnosis.verdict
        if not self.full or verdict.status is not Status.HUNG:
            return None
        return StallLook(now, verdict.to_json(), _members(self.analysed))


def look(address: str | None, opts: CollectOptions, previous: WatchState, now: float) -> Look:
    """One look in the watchdog's mode, taking stacks only where they can matter.

    Stacks tell parked from moving and name the culprit of a job that made no progress; a job
    whose tokens, Ray tasks, collectives or NVLink counters move needs none, and neither does a stall
    already judged on them in which nothing has moved since. So, first a look without any stacks:

    - when the last run saw such work move within its window (a progressing job): if work moved
      again and the analysis agrees the job progresses, that is the answer (most runs of a healthy
      job: no py-spy at all);
    - during a stall already alerted for (CRITICAL): if nothing moved in the window nor since the
      last run, and the same slime processes are there, the verdict of the stall's last full look
      stands, carried forward with its age, for up to CARRY_FOR_S after that look;

    anything else (first run, a stall before its alert, a job between phases, something moved) gets
    the full look: stacks at the first sample, and at the second only if nothing moved. A stall is
    therefore always judged on two sets of stacks, as `attach` judges it."""
    started = time.monotonic()
    full = dataclasses.replace(
        opts,
        stacks_only_if_stalled=True,
        nvml_interval_s=max(opts.nvml_interval_s, NVML_INTERVAL_S),
    )
    carry = _carriable(previous, now)
    if opts.stacks and (previous.window_moved or carry is not None):
        gate = attach(
            address,
            dataclasses.replace(
                full,
                stacks=False,
                gpu_detail=False,
                logs=False,
                history=False,
                timeout_s=opts.timeout_s / 2,
            ),
            command="check",
            judge_work_moved=work_moved,
        )
        markers = _markers(gate)
        status = gate.diagnosis.verdict.status
        if status is Status.UNKNOWN:
            return Look(gate, markers, full=False)
        if gate.work_moved and status is Status.PROGRESSING:
            return Look(_note_stackless(gate), markers, full=False)
        if (
            carry is not None
            and gate.work_moved is False
            and status is Status.HUNG
            and work_markers(markers) == work_markers(previous.markers)
            and _members(gate) == carry.members
        ):
            carried = _carried(gate, carry, now)
            if carried is not None:
                return Look(carried, markers, full=False, carried=carry)
        full = dataclasses.replace(
            full, timeout_s=max(1.0, opts.timeout_s - (time.monotonic() - started))
        )
    analysed = attach(address, full, command="check", judge_work_moved=work_moved)
    return Look(analysed, _markers(analysed), full=opts.stacks)


def work_moved(writer: BundleWriter) -> bool:
    """The look's judge (`collect`'s `judge_work_moved`): did anything that moves only with work
    (tokens, Ray tasks, collectives, NVLink) change between sample 0 and sample 1 of what the
    writer holds? The collector asks it after the second sample, before taking stacks again."""
    manifest = writer.manifest()
    seen = []
    for sample in (0, 1):
        probes = tuple(p for p in manifest.probes if p.sample in (sample, None))
        with Bundle(writer.root, dataclasses.replace(manifest, probes=probes)) as view:
            snap = load_snapshot(view, parse_cache(writer))
        seen.append(work_markers(progress_markers(snap, build_topology(snap))))
    return bool(changed_markers(seen[0], seen[1]))


def _carriable(previous: WatchState, now: float) -> StallLook | None:
    """The stall look a run may carry forward: one of the stall in progress, after its alert, and
    younger than CARRY_FOR_S."""
    look = previous.stall_look
    if look is None or previous.alerted_stall_since is None:
        return None
    if previous.alerted_stall_since != previous.last_progress_at:
        return None
    if not 0.0 <= now - look.at < CARRY_FOR_S:
        return None
    return look


def _carried(gate: Analysed, look: StallLook, now: float) -> Analysed | None:
    """The stall look's verdict, said to be carried; None if it cannot be read back."""
    try:
        verdict = verdict_from_json(look.verdict)
    except ValueError:
        return None
    age = now - look.at
    finding = Finding(
        "watchdog.carried",
        Severity.INFO,
        f"Carried from the full look {age:.0f} s ago: nothing has moved since (same work markers, "
        "same slime processes; this run looked without stacks). Stacks are taken again "
        f"{CARRY_FOR_S / 60:.0f} min after that look, or as soon as anything moves.",
    )
    verdict = dataclasses.replace(
        verdict,
        findings=(*verdict.findings, finding),
        window_s=gate.diagnosis.verdict.window_s,
        elapsed_s=gate.diagnosis.verdict.elapsed_s,
        extra={**verdict.extra, "carried_from": look.at},
    )
    return dataclasses.replace(gate, diagnosis=Diagnosis(verdict))


def _markers(analysed: Analysed) -> Markers:
    if analysed.snapshot is None or analysed.topology is None:
        return {}
    return progress_markers(analysed.snapshot, analysed.topology)


def _members(analysed: Analysed) -> tuple[str, ...]:
    if analysed.topology is None:
        return ()
    return tuple(sorted({f"{m.node_ip}:{m.pid}" for m in analysed.topology.members}))


def _note_stackless(analysed: Analysed) -> Analysed:
    verdict = analysed.diagnosis.verdict
    verdict = dataclasses.replace(verdict, findings=(*verdict.findings, STACKS_SKIPPED))
    return dataclasses.replace(
        analysed, diagnosis=dataclasses.replace(analysed.diagnosis, verdict=verdict)
    )


# the processes of the rollout's request path a plan remembers: the router (or a listening child of
# the RolloutManager, such as miles's session server), the engines' HTTP processes
_HOP_KINDS = frozenset({MemberKind.ROUTER, MemberKind.HTTP_SERVER})


def counter_plan(analysed: Analysed, target: str, now: float) -> CounterPlan | None:
    """What the next runs' counters-only look reads, from a look that judged the job progressing
    with work moving in its window: the job's engines whose work counters rose between its two
    samples (never one only a router lists: `Topology.listed`), and the slime processes of this
    node (the node its collector ran on) with their start times. None when no engine's counters
    rose (the job moved elsewhere: Ray tasks, NCCL, NVLink)."""
    snapshot, topology = analysed.snapshot, analysed.topology
    if (
        snapshot is None
        or topology is None
        or analysed.work_moved is not True
        or analysed.diagnosis.verdict.status is not Status.PROGRESSING
    ):
        return None
    job_engines = {e.url.rstrip("/") for e in topology.engines}
    metrics: dict[str, dict[int, SglangMetrics]] = {}
    for answer in snapshot.joined(HTTP_ANSWERS):
        url = answer.answer.url.rstrip("/")
        if (
            answer.kind is HttpPeer.ENGINE
            and url in job_engines
            and isinstance(answer.parsed, SglangMetrics)
        ):
            metrics.setdefault(answer.answer.url, {})[answer.sample] = answer.parsed
    engines = tuple(
        sorted(
            url
            for url, by_sample in metrics.items()
            if len(by_sample) >= 2
            and counter_rises(by_sample[min(by_sample)], by_sample[max(by_sample)])
        )
    )
    if not engines:
        return None
    here = analysed.node_ip
    started: dict[int, float] = {}
    for obs in snapshot.facts(PROCESSES):
        if obs.node_ip == here:
            for p in obs.fact:
                if p.create_time is not None and p.status != STATUS_ZOMBIE:
                    started[p.pid] = p.create_time
    processes = tuple(
        sorted(
            (m.pid, started[m.pid])
            for m in topology.members
            if m.node_ip == here and m.pid in started
        )
    )
    # the processes of the rollout's request path (analysis/parts/request_path/hops.py, by role): their CPU
    # times are what the counters look reads of the rule that engines' tokens count only while the
    # job's requests pass them
    hops = tuple(
        sorted(
            (m.pid, started[m.pid])
            for m in topology.members
            if m.node_ip == here and m.pid in started and m.kind in _HOP_KINDS
        )
    )
    return CounterPlan(now, target, engines, tuple(dict.fromkeys(processes)), hops)

"""The verdict of the watchdog's counters-only look, and when it must leave the answer to the
analysed look. Pure: the look itself (watchdog/counter_look.py) reads the engines and the process
table; this module judges what it read, and the watchdog only composes the two.

It answers only "progressing", and only when it saw what the analysed look's judgement rested on,
again: every engine whose work counters rose in that look's window answered `/metrics` twice, and
each one's counters rose again within this window; this node's slime processes of that look are all
still there; no process of the request path it remembers (the router, the engines' HTTP processes)
was CPU-bound over this window; and that look is younger than `REFRESH_S`. The analysis calls a job
progressing on an engine's rising work counters only while the job's requests pass their path
(analysis/readers/proof.py; a hop that holds them is CPU-bound in one frame while requests pile up at it,
analysis/parts/request_path/hops.py): the CPU time is the part of that rule this look can read, so a CPU-bound
hop sends the run to the analysed look, which decides. Where this look answers, the analysed look
would have given the same status and exit code; what it does not give are the findings of the
sources it did not read, for at most `REFRESH_S`.
Anything else (a counter flat, an engine silent, a process gone, an old plan) is a reason, and the
run takes the analysed look.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

from slime_hangdoctor.markers import Markers, cpu_bound, engine_markers
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.sglang import SGLANG, SglangMetrics, counter_rises
from slime_hangdoctor.verdict import Diagnosis, Finding, Severity, Stage, Status, Verdict

# The analysed look returns this long after the last one, whatever the counters say: the sources
# this look does not read (Ray, processes, GPUs, NCCL, logs) are looked at again.
REFRESH_S = 600.0
COUNTER_LOOK = "watchdog.counter_look"
# Said by every run that took no stacks because work moved (this look, and look.py's stackless one).
STACKS_SKIPPED = Finding(
    "watchdog.stacks_skipped",
    Severity.INFO,
    "No stacks taken: work moved in this run's window as in the last one.",
)


class CounterPlan(Protocol):
    """What the last analysed look left for this one to read (watchdog/state.py keeps it)."""

    @property
    def at(self) -> float: ...  # when that look was taken (epoch seconds)

    @property
    def target(self) -> str: ...  # the address it was taken for

    @property
    def engines(self) -> tuple[str, ...]: ...  # the engines whose work counters rose in it

    @property
    def processes(self) -> tuple[tuple[int, float], ...]: ...  # this node's slime processes


@dataclass(frozen=True)
class CounterRead:
    """One engine's `/metrics` at one moment: its counters, or why there are none."""

    metrics: SglangMetrics | None
    outcome: Outcome = Outcome.OK  # as the engine probe's record would say
    problem: str | None = None  # "timed out after 1.0s", "HTTP 503", "not Prometheus text: ..."


@dataclass(frozen=True)
class EngineCounters:
    url: str
    first: CounterRead
    last: CounterRead


@dataclass(frozen=True)
class CounterReading:
    """What one counters-only look read."""

    engines: tuple[EngineCounters, ...]
    gone: tuple[int, ...]  # pids of the plan's processes no longer there (or another process's)
    window_s: float  # from the start of the first reads to the start of the last
    elapsed_s: float
    # (pid, CPU seconds over the window, runnable at both reads, seconds its main thread was on a
    # CPU or waiting for one (None: /proc/<pid>/schedstat not read)) of the plan's request-path
    # processes that both reads saw
    hop_cpu: tuple[tuple[int, float, bool, float | None], ...] = ()


@dataclass(frozen=True)
class CounterJudgement:
    verdict: Verdict | None  # None: the analysed look decides
    why: str  # what the look saw, in words (the reason when there is no verdict)
    markers: Markers  # the engines' work counters at the window's end (what was read)
    outcomes: tuple[tuple[str, str], ...] = ()  # ("sglang", outcome) of each read, for the textfile


def usable_plan(plan: CounterPlan | None, target: str, now: float) -> str | None:
    """Why a remembered plan may not be read now, or None when it may."""
    if plan is None:
        return "no plan"
    if plan.target != target:
        return "the plan is for another address"
    age = now - plan.at
    if not 0.0 <= age < REFRESH_S:
        return f"the analysed look is {age:.0f} s old (it is taken again every {REFRESH_S:.0f} s)"
    return None


def judge_counters(plan: CounterPlan, reading: CounterReading, now: float) -> CounterJudgement:
    judged = _judge(plan, reading, now)
    outcomes = tuple(
        (SGLANG, read.outcome.value) for e in reading.engines for read in (e.first, e.last)
    )
    return dataclasses.replace(judged, outcomes=outcomes)


def _judge(plan: CounterPlan, reading: CounterReading, now: float) -> CounterJudgement:
    markers: Markers = {}
    rises: list[tuple[str, tuple[str, ...]]] = []
    flat: list[str] = []
    silent: list[str] = []
    for e in reading.engines:
        first, last = e.first.metrics, e.last.metrics
        if last is not None:
            markers.update(engine_markers(e.url, last))
        if first is None or last is None:
            silent.append(f"{e.url} ({e.first.problem or e.last.problem})")
            continue
        rose = counter_rises(first, last)
        if rose:
            rises.append((e.url, rose))
        else:
            flat.append(e.url)
    window = f"{reading.window_s:.1f} s"
    if silent:
        return CounterJudgement(None, f"no counters from {'; '.join(silent)}", markers)
    if flat:
        return CounterJudgement(
            None, f"work counters flat for {window} at {', '.join(flat)}", markers
        )
    if reading.gone:
        pids = ", ".join(str(p) for p in reading.gone)
        return CounterJudgement(None, f"slime process(es) {pids} gone from this node", markers)
    bound = [
        (pid, cpu)
        for pid, cpu, runnable, wanted in reading.hop_cpu
        if cpu_bound(cpu, reading.window_s, runnable, wanted)
    ]
    if bound:
        pid, cpu = bound[0]
        return CounterJudgement(
            None,
            f"process {pid} on the rollout's request path was CPU-bound over the window "
            f"({cpu:.1f} CPU-s in {window}): the engines' tokens count only while the job's "
            "requests pass it",
            markers,
        )
    if not rises:
        return CounterJudgement(None, "no engine to read", markers)
    why = (
        f"the work counters of {len(rises)} engine(s) rose within {window}, as in the analysed "
        f"look of {now - plan.at:.0f} s ago, and this node's {len(plan.processes)} slime "
        "process(es) of that look are all there"
    )
    return CounterJudgement(_verdict(plan, reading, rises, why, now), why, markers)


def _verdict(
    plan: CounterPlan,
    reading: CounterReading,
    rises: list[tuple[str, tuple[str, ...]]],
    why: str,
    now: float,
) -> Verdict:
    texts = [f"engine {url}: {', '.join(rose[:3])}" for url, rose in rises]
    refresh = plan.at + REFRESH_S - now
    findings = (
        Finding("progress", Severity.INFO, "Progress between the samples", tuple(texts[:8])),
        STACKS_SKIPPED,
        Finding(
            COUNTER_LOOK,
            Severity.INFO,
            f"Counters only: {why}. Nothing else was read in this run; the analysed look "
            f"(Ray, processes, GPUs, NCCL, logs) is taken again in {max(0.0, refresh):.0f} s, or "
            "as soon as a counter is flat, an engine silent or a process gone.",
        ),
    )
    return Verdict(
        status=Status.PROGRESSING,
        stage=Stage.NONE,
        summary="Progressing: " + "; ".join(texts[:2]),
        findings=findings,
        blind_spots=(
            "counters-only look: Ray state, processes, sockets, GPUs, NCCL and logs were not read "
            "in this run",
        ),
        window_s=reading.window_s,
        elapsed_s=reading.elapsed_s,
        confidence="medium",
        extra={"counter_look": {"engines": list(plan.engines), "plan_at": plan.at}},
    )


def counters_first(diagnosis: Diagnosis, why: str) -> Diagnosis:
    """The analysed look's diagnosis, saying why the counters-only look tried first did not answer."""
    finding = Finding(
        COUNTER_LOOK,
        Severity.INFO,
        f"Counters only, first: {why}; so this run took the analysed look.",
    )
    verdict = diagnosis.verdict
    verdict = dataclasses.replace(verdict, findings=(*verdict.findings, finding))
    return dataclasses.replace(diagnosis, verdict=verdict)

"""How one watchdog run turns a verdict plus the remembered markers into an exit code, and the
verdict into the one it reports (its stall clock, its own problems). Pure."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from slime_hangdoctor.markers import Markers, changed_markers, work_markers
from slime_hangdoctor.verdict import (
    Diagnosis,
    ExitCode,
    Finding,
    NextStep,
    Severity,
    Stage,
    Status,
    Verdict,
)
from slime_hangdoctor.watchdog.state import CounterPlan, StallLook, WatchState


@dataclass(frozen=True)
class CheckDecision:
    exit_code: ExitCode
    stalled_for_s: float  # seconds without progress (0 when progressing)
    state: WatchState  # what to remember for the next run
    new_stall: bool  # a CRITICAL stall we have not alerted for yet
    progressed_between_runs: tuple[str, ...] = ()  # markers that moved since the last run
    reason: str = ""


def decide_check(
    verdict: Verdict,
    markers: Markers,
    previous: WatchState,
    *,
    now: float,
    stall_after_s: float,
    window_moved: bool = False,
    stall_look: StallLook | None = None,
    counter_plan: CounterPlan | None = None,
) -> CheckDecision:
    """Exit 0 on progress or idle, 1 while a stall is younger than `stall_after_s`, 2 past it, 3 unknown.

    `window_moved`: this run saw work markers move within its own window (remembered, so that the
    next run may first look without stacks). `stall_look`: the full look at a stall that a later
    run may carry forward (kept only while the job stays hung). `counter_plan`: what a later run's
    counters-only look reads (kept only while the job progresses)."""
    runs = previous.runs + 1
    if verdict.status is Status.UNKNOWN:
        state = WatchState(
            previous.last_progress_at, now, previous.markers, previous.alerted_stall_since, runs
        )
        return CheckDecision(
            ExitCode.UNKNOWN,
            _since(previous.last_progress_at, now),
            state,
            False,
            (),
            verdict.summary,
        )
    if verdict.status in (Status.PROGRESSING, Status.IDLE):
        plan = counter_plan if verdict.status is Status.PROGRESSING else None
        state = WatchState(now, now, markers, None, runs, window_moved, counter_plan=plan)
        return CheckDecision(ExitCode.OK, 0.0, state, False, (), verdict.status.value)
    # Only markers that move with work restart the clock: a stack digest also changes while a CPU-hot
    # loop spins in place (a sympy reward that never ends).
    moved = tuple(changed_markers(work_markers(previous.markers), work_markers(markers)))
    last = previous.last_progress_at
    if moved and previous.last_run_at is not None:
        last = max(last or 0.0, previous.last_run_at)
    if last is None:
        last = now - verdict.window_s
    stalled = max(0.0, now - last)
    critical = stalled >= stall_after_s
    new_stall = critical and previous.alerted_stall_since != last
    alerted = last if critical else previous.alerted_stall_since
    state = WatchState(last, now, markers, alerted, runs, window_moved, stall_look)
    code = ExitCode.CRITICAL if critical else ExitCode.WARNING
    why = f"no progress for {stalled:.0f}s (threshold {stall_after_s:.0f}s)"
    if moved:
        why += f"; {len(moved)} progress markers moved since the last run"
    return CheckDecision(code, stalled, state, new_stall, moved, why)


def _since(t: float | None, now: float) -> float:
    return 0.0 if t is None else max(0.0, now - t)


def parse_duration(text: str) -> float:
    """'90', '90s', '15m', '2h', '1h30m' -> seconds. Raises ValueError."""
    import re

    text = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhd])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r} (use e.g. 90s, 15m, 2h)")
    scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(float(n) * scale[u] for n, u in parts)


def annotated(diagnosis: Diagnosis, decision: CheckDecision, notes: list[str]) -> Diagnosis:
    """The verdict as the watchdog reports it: its stall clock, the state file's notes, suspected
    where the decision warns, and how long the job has stalled."""
    findings = list(diagnosis.verdict.findings)
    findings.append(Finding("watchdog.stall_clock", Severity.INFO, decision.reason or "no stall"))
    for note in notes:
        findings.append(Finding("watchdog.state_file", Severity.WARNING, note))
    verdict = dataclasses.replace(
        diagnosis.verdict,
        findings=tuple(findings),
        suspected=decision.exit_code == ExitCode.WARNING,
        extra={**diagnosis.verdict.extra, "stalled_for_s": round(decision.stalled_for_s, 1)},
    )
    return dataclasses.replace(diagnosis, verdict=verdict)


def with_problem(
    diagnosis: Diagnosis, problem: str, code: str = "watchdog.stall_bundle"
) -> Diagnosis:
    """The verdict with a problem of the run itself (a stall bundle or a log file not written)."""
    verdict = diagnosis.verdict
    finding = Finding(code, Severity.WARNING, problem)
    verdict = dataclasses.replace(
        verdict,
        findings=(*verdict.findings, finding),
        blind_spots=(*verdict.blind_spots, problem),
    )
    return dataclasses.replace(diagnosis, verdict=verdict)


NO_JOB_EXPECTED = (
    "No slime job found, and --expect-job (SLIME_HANGDOCTOR_EXPECT_JOB) says one should run here: "
)


def expecting_job(
    diagnosis: Diagnosis, decision: CheckDecision, expect_job: bool
) -> tuple[Diagnosis, CheckDecision]:
    """With `--expect-job`, a run that found no job (IDLE) is UNKNOWN, exit 3, with the reason
    (a wrong --uid, --local on the wrong node, a wrong address look exactly like no job); the
    state is what the run decided (no stall clock runs for a job never seen)."""
    verdict = diagnosis.verdict
    if not expect_job or verdict.status is not Status.IDLE:
        return diagnosis, decision
    why = NO_JOB_EXPECTED + verdict.summary
    finding = Finding("watchdog.expect_job", Severity.WARNING, why)
    verdict = dataclasses.replace(
        verdict,
        status=Status.UNKNOWN,
        stage=Stage.UNKNOWN,
        summary=why,
        findings=(finding, *verdict.findings),
        next_steps=(
            NextStep(
                why="Check the address (or --local on the node that runs the job) and --uid: "
                "the doctor found no RUNNING Ray job and no slime actor or process.",
                by="watchdog/decide:expecting_job",
            ),
            *verdict.next_steps,
        ),
    )
    decision = dataclasses.replace(decision, exit_code=ExitCode.UNKNOWN, reason=why)
    return dataclasses.replace(diagnosis, verdict=verdict), decision

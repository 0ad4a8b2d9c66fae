"""What the log tails add to a verdict: they support and explain it, never overrule live evidence.

- slime's `Timer <name> start` with no end (slime#1487: "Timer actor_train start", then silence) is a
  second stage signal: it names the stage only when stacks, Ray methods and the other sources left it
  unknown, and otherwise says whether it agrees.
- The last Traceback / error / OOM / timeout lines of each log, SGLang's "Cache not flushed because
  there are pending requests" (miles#1585: a request never reaped blocks flush and offload), slime's
  HTTP retries, SGLang's SubprocessWatchdog line naming the engine's child that died (and how), and
  the time of each log's last line.
Pure: reads the Snapshot only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from slime_hangdoctor.analysis.source_analysis import Section, SourceAnalysis
from slime_hangdoctor.parsers.logs import CHILD_CRASHED, SPEC, LogKind, LogLine, LogObs, LogTimer
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.verdict import Finding, Severity, Stage, Status

# slime's Timer names (slime.md §7) -> the stage a still-open timer of that name means. `train_wait`
# means the trainers wait for rollout: it names no stage of theirs.
TIMER_STAGES: dict[str, Stage] = {
    "wake_up": Stage.TRAIN,
    "data_preprocess": Stage.TRAIN,
    "train": Stage.TRAIN,
    "ref_log_probs": Stage.TRAIN,
    "log_probs": Stage.TRAIN,
    "actor_train": Stage.TRAIN,
    "critic_train": Stage.TRAIN,
    "ref_model_update": Stage.TRAIN,
    "sleep": Stage.TRAIN,
    "save_model": Stage.CHECKPOINT,
    "update_weights": Stage.WEIGHT_SYNC,
}
_PROBLEM_KINDS = (LogKind.TRACEBACK, LogKind.OOM, LogKind.TIMEOUT, LogKind.ERROR)
MAX_LOGS_NAMED = 4


@dataclass(frozen=True)
class OpenTimer:
    log: LogObs
    timer: LogTimer

    @property
    def stage(self) -> Stage | None:
        return TIMER_STAGES.get(self.timer.name)


def _logs(snapshot: Snapshot) -> tuple[LogObs, ...]:
    return tuple(obs.fact for obs in snapshot.facts(SPEC))


def open_timer(snapshot: Snapshot) -> OpenTimer | None:
    """The innermost (latest started) open slime Timer that names a stage, over every log."""
    found = [
        OpenTimer(log, t)
        for log in _logs(snapshot)
        for t in log.tail.open_timers
        if t.name in TIMER_STAGES
    ]
    best: OpenTimer | None = None
    for o in found:  # a tie (one-second log times) goes to the later line: the inner timer
        if best is None or (o.timer.started or 0.0) >= (best.timer.started or 0.0):
            best = o
    return best


def log_stage(snapshot: Snapshot) -> Stage | None:
    """The stage the logs name (an open Timer), for a verdict whose stage is otherwise unknown."""
    found = open_timer(snapshot)
    return found.stage if found is not None else None


def log_findings(snapshot: Snapshot, status: Status, stage: Stage) -> list[Finding]:
    """Findings from the log tails; severity never above warning (logs explain, live data decides).
    `stage`: the stage live evidence found (unknown when none did)."""
    logs = _logs(snapshot)
    if not logs:
        return []
    now = snapshot.manifest.created_at
    hung = status is Status.HUNG
    return [
        *_open_timer_finding(snapshot, hung, stage, now),
        *_error_findings(logs, now),
        *_per_log_findings(logs, hung, now),
        *(_last_lines(logs, now) if hung else []),
    ]


def _open_timer_finding(snapshot: Snapshot, hung: bool, stage: Stage, now: float) -> list[Finding]:
    found = open_timer(snapshot)
    if found is None or found.stage is None:
        return []
    if not hung or stage is Stage.NONE:
        agree = f"names the stage `{found.stage.value}`"
    elif stage is Stage.UNKNOWN:
        agree = f"names the stage `{found.stage.value}` (used: no live source named one)"
    elif found.stage is stage:
        agree = "agrees with the stage found live"
    else:
        agree = (
            f"names `{found.stage.value}` while live evidence says `{stage.value}` "
            "(live evidence decides)"
        )
    last = found.log.tail.last_time
    return [
        Finding(
            "log-open-timer",
            Severity.WARNING if hung else Severity.INFO,
            f"{found.log.label}: `Timer {found.timer.name} start`"
            + _at(found.timer.started, now)
            + " has no end"
            + (f"; the log's last line is{_at(last, now)}" if last is not None else "")
            + f" - it {agree}.",
            (found.timer.text,),
        )
    ]


def _error_findings(logs: tuple[LogObs, ...], now: float) -> list[Finding]:
    """The logs with tracebacks, OOM, timeouts or errors, the newest first (at most a few)."""
    problems = [(log, [n for n in log.tail.notable if n.kind in _PROBLEM_KINDS]) for log in logs]
    problems = [(log, lines) for log, lines in problems if lines]
    problems.sort(key=lambda p: max(n.time or 0.0 for n in p[1]), reverse=True)
    out: list[Finding] = []
    for log, lines in problems[:MAX_LOGS_NAMED]:
        newest = lines[-1]
        kinds = ", ".join(dict.fromkeys(n.kind.value for n in lines))
        out.append(
            Finding(
                "log-errors",
                Severity.WARNING,
                f"{log.label}: {kinds} lines; the last{_at(newest.time, now)}: {newest.text}",
                tuple(n.text for n in lines[-3:]),
            )
        )
    return out


def _child_crashed(log: LogObs, crashed: list[LogLine], now: float) -> str | None:
    """SGLang's SubprocessWatchdog line: which child of an engine died, and its exit code (a
    signal's number when negative: -9 is SIGKILL, what the OOM killer sends)."""
    m = CHILD_CRASHED.search(crashed[-1].text)
    if m is None:
        return None
    code = int(m["code"])
    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
    if code == -9:
        how += " (SIGKILL: the OOM killer, or a kill -9)"
    return (
        f"{log.label}: SGLang's {m['name']} (pid {m['pid']}) {how}"
        f"{_at(crashed[-1].time, now)}; the engine's SubprocessWatchdog then SIGQUIT its "
        "HTTP process, which kills every process of the engine"
    )


def _not_flushed(log: LogObs, flush: list[LogLine], now: float) -> str:
    counts = log.tail.pending_flush
    held = f" (#queue-req {counts[0]}, #running-req {counts[1]})" if counts else ""
    return (
        f"{log.label}: SGLang refused to flush its cache because requests are pending"
        f"{held}, last{_at(flush[-1].time, now)}: a request that never finishes blocks "
        "flush_cache and so release_memory_occupation / the weight update (miles#1585)."
    )


def _retrying(log: LogObs, retries: list[LogLine], now: float) -> str:
    return (
        f"{log.label}: slime's HTTP client is retrying, last{_at(retries[-1].time, now)}"
        f": {retries[-1].text}"
    )


@dataclass(frozen=True)
class _PerLog:
    """A kind of log line that makes one finding per log that has it (a warning; `unhung`: its
    severity while the job is not hung), its message from the log and its lines of that kind
    (oldest first; None: the lines say nothing after all)."""

    kind: LogKind
    rule: str
    say: Callable[[LogObs, list[LogLine], float], str | None]
    unhung: Severity = Severity.WARNING


_PER_LOG = (
    _PerLog(LogKind.CHILD_CRASHED, "log-engine-child-crashed", _child_crashed),
    _PerLog(LogKind.CACHE_NOT_FLUSHED, "log-cache-not-flushed", _not_flushed),
    _PerLog(LogKind.RETRY, "log-http-retries", _retrying, unhung=Severity.INFO),
)


def _per_log_findings(logs: tuple[LogObs, ...], hung: bool, now: float) -> list[Finding]:
    """The findings of `_PER_LOG`, kind by kind, each with its kind's last two lines."""
    out: list[Finding] = []
    for per in _PER_LOG:
        severity = Severity.WARNING if hung else per.unhung
        for log in logs:
            lines = [n for n in log.tail.notable if n.kind is per.kind]
            message = per.say(log, lines, now) if lines else None
            if message is not None:
                out.append(Finding(per.rule, severity, message, tuple(n.text for n in lines[-2:])))
    return out


def _last_lines(logs: tuple[LogObs, ...], now: float) -> list[Finding]:
    timed = sorted(
        (log for log in logs if log.tail.last_time is not None),
        key=lambda log: log.tail.last_time or 0.0,
    )
    if not timed:
        return []
    return [
        Finding(
            "log-last-lines",
            Severity.INFO,
            "Last log lines: "
            + "; ".join(f"{log.label}{_at(log.tail.last_time, now)}" for log in timed[:6]),
            tuple(f"{log.label}: {log.tail.last_line}" for log in timed[:6]),
        )
    ]


def _at(when: float | None, now: float) -> str:
    """` at 10:01:02 UTC (25 min before the look)`; empty when the line carried no time."""
    if when is None:
        return ""
    text = " at " + time.strftime("%H:%M:%S UTC", time.gmtime(when))
    if now > 0 and now >= when:
        age = now - when
        text += (
            f" ({age / 60:.0f} min before the look)"
            if age >= 120
            else f" ({age:.0f} s before the look)"
        )
    return text


ANALYSIS = SourceAnalysis(
    name="logs",
    findings=lambda r: log_findings(r.world.snapshot, r.status, r.live_stage),
    section=Section.LOGS,
    stage=lambda world: log_stage(world.snapshot),
)

"""Logs support and explain a verdict, never overrule live evidence: an open slime Timer names the
stage only when no live source did (slime#1487), and disagrees politely otherwise; errors, SGLang's
refused flush (miles#1585) and retries become findings of at most warning."""

from __future__ import annotations

from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.parsers.logs import LogKind, LogLine, LogObs, LogOwner, LogTail, LogTimer
from slime_hangdoctor.parsers.sglang import SglangMetrics
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.topology import Topology
from slime_hangdoctor.verdict import Role, Severity, Stage, Status, Verdict
from tests.unit import recorded_shapes as rs
from tests.unit.analysis_builders import (
    http,
    member,
    procs_obs,
    running_job,
    snapshot,
    topology,
)

URL0 = "http://10.0.0.1:15000"
# The process rows of demo fault reward_service_stuck (every actor between tasks, titles without a
# method): driver 16270, train rank 16590, engine actor 16414; moved to pids 100, 300 and 400.
IDLE_JOB = rs.bundle("demo/reward_service_stuck")
IDLE_JOB_PIDS = {16270: 100, 16590: 300, 16414: 400}
NOW = 2000.0  # the manifest's created_at in analysis_builders

# slime#1487: rank 0's log ends at "Timer actor_train start".
TRAINER_TAIL = LogTail(
    lines=40,
    last_time=NOW - 1500,
    last_line="[2026-01-25 10:01:05] timer.py:24 - Timer actor_train start",
    open_timers=(
        LogTimer("train", NOW - 1510, "[2026-01-25 10:00:55] timer.py:24 - Timer train start"),
        LogTimer(
            "actor_train", NOW - 1500, "[2026-01-25 10:01:05] timer.py:24 - Timer actor_train start"
        ),
    ),
)
ENGINE_TAIL = LogTail(
    lines=12,
    last_time=NOW - 30,
    last_line="[2026-01-25 10:25:50 TP0] Cache not flushed because there are pending requests. "
    "#queue-req: 0, #running-req: 1",
    notable=(
        LogLine(
            LogKind.CACHE_NOT_FLUSHED,
            "[2026-01-25 10:25:50 TP0] Cache not flushed because there are pending requests. "
            "#queue-req: 0, #running-req: 1",
            NOW - 30,
        ),
        LogLine(LogKind.TRACEBACK, "TimeoutError: Timeout while flushing cache.", NOW - 20),
    ),
    pending_flush=(0, 1),
)


def _log(tail: LogTail, cls: str, pid: int) -> LogObs:
    return LogObs(LogOwner.ACTOR, tail, actor_id=f"a{pid}", class_name=cls, pid=pid, suffix="err")


def _frozen_engine_job(logs: tuple[LogObs, ...] = (), stacks: tuple = ()) -> Snapshot:  # type: ignore[type-arg]
    """Ray state, processes and an engine whose token counters stay frozen; no py-spy (denied)."""
    return snapshot(
        http=tuple(
            http(
                URL0,
                "/metrics",
                200,
                SglangMetrics(decode_tokens_total=5000, running_reqs=0, queue_reqs=0),
                sample=s,
            )
            for s in (0, 1)
        ),
        processes=tuple(
            procs_obs(
                s,
                *(
                    rs.process(IDLE_JOB, pid, s, as_pid=as_pid, ppid=1)
                    for pid, as_pid in IDLE_JOB_PIDS.items()
                ),
            )
            for s in (0, 1)
        ),
        stacks=stacks,
        jobs=(running_job(),),
        logs=logs,
    )


def _topo() -> Topology:
    return topology(
        member(Role.DRIVER, 100, "driver"),
        member(Role.TRAIN_RANK, 300, cls="MegatronTrainRayActor", rank=0, actor_id="a300"),
        member(Role.SGLANG_ENGINE, 400, cls="SGLangEngine", url=URL0, actor_id="a400"),
    )


def _v(snap: Snapshot) -> Verdict:
    return diagnose(snap, _topo()).verdict


def _finding(v: Verdict, rule: str) -> str:
    found = [f for f in v.findings if f.rule == rule]
    assert len(found) == 1, [f.rule for f in v.findings]
    return found[0].message


def test_an_open_timer_names_the_stage_only_when_no_live_source_did() -> None:
    without = _v(_frozen_engine_job())
    assert (without.status, without.stage) == (Status.HUNG, Stage.UNKNOWN)
    v = _v(_frozen_engine_job((_log(TRAINER_TAIL, "MegatronTrainRayActor", 300),)))
    assert (v.status, v.stage) == (Status.HUNG, Stage.TRAIN)
    msg = _finding(v, "log-open-timer")
    assert "`Timer actor_train start`" in msg and "(25 min before the look)" in msg
    assert "used: no live source named one" in msg


def test_an_open_timer_never_overrules_the_stage_the_stacks_show() -> None:
    """The stacks of demo fault weight_sync_engine_missing: the driver (pid 30064) in `ray.get` of
    the weight update, train rank 0 (pid 30272) in `dist.broadcast` of it; moved to 100 and 300."""
    sync = rs.bundle("demo/weight_sync_engine_missing")
    stacks = tuple(
        rs.stack(sync, pid, sample, as_pid=as_pid)
        for sample in (0, 1)
        for pid, as_pid in ((30064, 100), (30272, 300))
    )
    v = _v(_frozen_engine_job((_log(TRAINER_TAIL, "MegatronTrainRayActor", 300),), stacks))
    assert v.stage is Stage.NCCL_BROADCAST
    assert "(live evidence decides)" in _finding(v, "log-open-timer")


def test_errors_and_a_refused_flush_are_warnings_that_explain() -> None:
    v = _v(_frozen_engine_job((_log(ENGINE_TAIL, "SGLangEngine", 400),)))
    flush = _finding(v, "log-cache-not-flushed")
    assert "(#queue-req 0, #running-req 1)" in flush and "miles#1585" in flush
    errors = _finding(v, "log-errors")
    assert errors.startswith("SGLangEngine log (pid 400, err): traceback lines")
    assert "TimeoutError: Timeout while flushing cache." in errors
    assert {f.severity for f in v.findings if f.rule.startswith("log-")} <= {
        Severity.WARNING,
        Severity.INFO,
    }
    assert "Last log lines" in _finding(v, "log-last-lines")


def test_no_logs_no_log_findings_and_the_verdict_is_unchanged() -> None:
    v = _v(_frozen_engine_job())
    assert not [f for f in v.findings if f.rule.startswith("log-")]


def test_http_retries_of_the_rollout_manager_are_named_with_their_url() -> None:
    # slime.md §7: `_post` logs `Error: ..., retrying... (attempt k/60, url=...)` before it retries.
    line = (
        "[2026-01-25 10:25:50] http_utils.py:118 - Error: Server disconnected, retrying... "
        "(attempt 7/60, url=http://10.0.0.2:3333/generate)"
    )
    tail = LogTail(
        lines=20,
        last_time=NOW - 10,
        last_line=line,
        notable=(LogLine(LogKind.RETRY, line, NOW - 10),),
    )
    v = _v(_frozen_engine_job((_log(tail, "RolloutManager", 200),)))
    msg = _finding(v, "log-http-retries")
    assert "attempt 7/60, url=http://10.0.0.2:3333/generate" in msg


def test_timers_started_in_the_same_second_name_the_inner_one() -> None:
    # slime logs `Timer train start` and `Timer actor_train start` within one second: log times
    # have one-second resolution, so the later line (the inner timer) is the one quoted.
    same = LogTail(
        lines=2,
        last_time=NOW - 60,
        last_line="[2026-01-25 10:24:00] timer.py:24 - Timer actor_train start",
        open_timers=(
            LogTimer("train", NOW - 60, "[2026-01-25 10:24:00] timer.py:24 - Timer train start"),
            LogTimer(
                "actor_train",
                NOW - 60,
                "[2026-01-25 10:24:00] timer.py:24 - Timer actor_train start",
            ),
        ),
    )
    v = _v(_frozen_engine_job((_log(same, "MegatronTrainRayActor", 300),)))
    assert "`Timer actor_train start`" in _finding(v, "log-open-timer")

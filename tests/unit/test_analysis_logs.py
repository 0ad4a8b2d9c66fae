"""Logs support and explain a verdict, never overrule live evidence: an open slime Timer names the
stage only when no live source did (slime#1487), and disagrees politely otherwise; errors, SGLang's
refused flush (miles#1585) and retries become findings of at most warning.

On recorded demo bundles (tests/fixtures/analysis/demo, provenance in tests/fixtures/README.md):
`train_custom_loss_stuck` (slime#1487's shape: rank 0's log ends at `Timer actor_train start`, the
FSDP frames name `train` too; without the stacks only the Timer does) and `weight_sync_engine_wedged` (the stacks name `nccl_broadcast`, rank
0's log has `Timer update_weights` open). Variants by named transformations: without the `ray_logs`
source (`transforms.bundle_without_sources`), and with an actor's log body replaced by the real
Ray log of an actor of the same class (`transforms.bundle_with_artefact`; the real logs of
tests/fixtures/real/local-cpu-ray-2.60-logs: SGLang's refused flush, slime's HTTP retries and a
traceback)."""

from __future__ import annotations

from pathlib import Path

from slime_hangdoctor.verdict import Role, Severity, Stage, Status, Verdict
from tests.fixtures import transforms as tf
from tests.unit.demo_bundles import diagnosed, unpacked

REAL_LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "local-cpu-ray-2.60-logs"
STUCK = "train_custom_loss_stuck"
# its log records: rank 0 (pid 12912), the RolloutManager (12794), engine 0's actor (12823)
RANK0_OUT = "FSDPTrainRayActor-cbef6be62300-out"
ROLLOUT_ERR = "RolloutManager-d987d8356dcc-err"
ENGINE_ERR = "SGLangEngine-dfa0479d7eec-err"


def _finding(v: Verdict, rule: str) -> str:
    found = [f for f in v.findings if f.rule == rule]
    assert len(found) == 1, [f.rule for f in v.findings]
    return found[0].message


def _with_real_logs(tmp_path: Path) -> Path:
    """The stuck job, its RolloutManager's and engine 0's err logs replaced by the real ones."""
    base = unpacked(STUCK, tmp_path / "base")
    rollout = (REAL_LOGS / "RolloutManager-9ef86fe911f5-err.log").read_text()
    engine = (REAL_LOGS / "SGLangEngine-d56cdd5e663b-err.log").read_text()
    step = tf.bundle_with_artefact(base, tmp_path / "rm", "ray_logs", rollout, ROLLOUT_ERR)
    return tf.bundle_with_artefact(step, tmp_path / "both", "ray_logs", engine, ENGINE_ERR)


def test_an_open_timer_agrees_with_the_stage_the_stacks_name(tmp_path: Path) -> None:
    """The FSDP frames name `train` (signatures/slime.py); the Timer is not used, it agrees. Where
    no live source names a stage, the Timer is used: the test below, without the stacks."""
    base = unpacked(STUCK, tmp_path / "base")
    without = diagnosed(tf.bundle_without_sources(base, tmp_path / "nl", frozenset({"ray_logs"})))
    assert (without.verdict.status, without.verdict.stage) == (Status.HUNG, Stage.TRAIN)
    v = diagnosed(base).verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.TRAIN)
    msg = _finding(v, "log-open-timer")
    assert msg.startswith("FSDPTrainRayActor log (pid 12912, out): `Timer actor_train start`")
    assert "(4 s before the look)" in msg and "it agrees with the stage found live" in msg


def test_without_any_stack_the_fsdp_method_names_the_stage_and_the_timer_agrees(
    tmp_path: Path,
) -> None:
    """py-spy denied (no `pyspy`, no dashboard traceback): no rank is named; the train ranks'
    Ray method (`ray::FSDPTrainRayActor.train`, signatures/slime.py JAN_METHODS) names `train`,
    and rank 0's open Timer agrees."""
    base = unpacked(STUCK, tmp_path / "base")
    stackless = frozenset({"pyspy", "dashboard_traceback"})
    d = diagnosed(tf.bundle_without_sources(base, tmp_path / "ns", stackless))
    v = d.verdict
    assert (v.status, v.stage, v.culprits) == (Status.HUNG, Stage.TRAIN, ())
    assert "it agrees with the stage found live" in _finding(v, "log-open-timer")
    ranks = [r for r in d.rows if r.role is Role.TRAIN_RANK]
    assert ranks and all(r.stage is Stage.TRAIN and "running train" in r.state for r in ranks)


def test_an_open_timer_never_overrules_the_stage_the_stacks_show(tmp_path: Path) -> None:
    v = diagnosed(unpacked("weight_sync_engine_wedged", tmp_path)).verdict
    assert v.stage is Stage.NCCL_BROADCAST
    msg = _finding(v, "log-open-timer")
    assert "`Timer update_weights start`" in msg
    assert "it names `weight_sync` while live evidence says `nccl_broadcast`" in msg
    assert "(live evidence decides)" in msg


def test_errors_and_a_refused_flush_are_warnings_that_explain(tmp_path: Path) -> None:
    before = diagnosed(unpacked(STUCK, tmp_path / "before")).verdict
    v = diagnosed(_with_real_logs(tmp_path)).verdict
    flush = _finding(v, "log-cache-not-flushed")
    assert flush.startswith("SGLangEngine log (pid 12823, err)")
    assert "(#queue-req 0, #running-req 1)" in flush and "miles#1585" in flush
    errors = _finding(v, "log-errors")
    assert errors.startswith("RolloutManager log (pid 12794, err): traceback lines")
    assert "TimeoutError: Timeout while flushing cache." in errors
    assert {f.severity for f in v.findings if f.rule.startswith("log-")} <= {
        Severity.WARNING,
        Severity.INFO,
    }
    assert "Last log lines" in _finding(v, "log-last-lines")
    # they explain; they decide nothing
    assert (v.status, v.stage, v.culprits) == (before.status, before.stage, before.culprits)


def test_no_logs_no_log_findings_and_the_culprit_is_unchanged(tmp_path: Path) -> None:
    base = unpacked(STUCK, tmp_path / "base")
    with_logs = diagnosed(base).verdict
    assert [f for f in with_logs.findings if f.rule.startswith("log-")]
    v = diagnosed(tf.bundle_without_sources(base, tmp_path / "nl", frozenset({"ray_logs"}))).verdict
    assert not [f for f in v.findings if f.rule.startswith("log-")]
    assert v.culprits == with_logs.culprits


def test_http_retries_of_the_rollout_manager_are_named_with_their_url(tmp_path: Path) -> None:
    # slime.md §7: `_post` logs `Error: ..., retrying... (attempt k/60, url=...)` before it retries.
    msg = _finding(diagnosed(_with_real_logs(tmp_path)).verdict, "log-http-retries")
    assert msg.startswith("RolloutManager log (pid 12794, err)")
    assert "attempt 3/60, url=http://10.0.0.2:3333/generate" in msg


def test_timers_started_in_the_same_second_name_the_inner_one(tmp_path: Path) -> None:
    # slime logs `Timer train start` and `Timer actor_train start` within one second: log times
    # have one-second resolution, so the later line (the inner timer) is the one quoted.
    base = unpacked(STUCK, tmp_path / "base")
    (log,) = base.rglob(f"{RANK0_OUT}.log")
    starts = [line[:21] for line in log.read_text().splitlines()[-2:]]
    assert log.read_text().splitlines()[-2].endswith("Timer train start")
    assert starts[0] == starts[1]  # the same second, as recorded
    assert "`Timer actor_train start`" in _finding(diagnosed(base).verdict, "log-open-timer")

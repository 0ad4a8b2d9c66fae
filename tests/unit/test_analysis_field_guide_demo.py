"""The field guide's rows on recorded demo bundles of their shape (docs/field-guide.md; provenance in
tests/fixtures/README.md), where the verdict could mislead.

- Row 22, slime#1908: every train rank waits in the same `gather_object` of Megatron's
  `save_state_dict_async_plan` (demo fault `checkpoint_plan_gather_stuck`: each rank was given its
  own coordinator, so each waits for the others' plans). No rank is elsewhere, so no rank stands
  out: the doctor says hung in `checkpoint`, only suspected, names no culprit, and `checkpoint-stall`
  says that every rank waits in the save's collective (a mismatch, or a rank it cannot see), never a
  storage problem and never one rank's fault.
- Row 20, open-instruct PR#1454: a health check queued behind a blocking weight broadcast on the
  same actor (demo fault `weight_sync_health_check_queued`: slime's RolloutHealthMonitor of
  `--use-fault-tolerance` calls `health_generate` on an engine actor that runs
  `update_weights_from_distributed`, blocked in the broadcast that the wedged engine 1 never
  joins). Ray's task list shows the check queued behind the update (`ray_tasks.queues`, info); the
  culprit stays the engine that never joined the broadcast, not the one whose actor holds the queue.
"""

from __future__ import annotations

from slime_hangdoctor.verdict import ExitCode, Finding, Severity, Stage, Status, Verdict
from tests.unit.demo_bundles import DEMO, diagnosed


def _finding(v: Verdict, rule: str) -> Finding:
    found = [f for f in v.findings if f.rule == rule]
    assert len(found) == 1, [f.rule for f in v.findings]
    return found[0]


def test_every_rank_in_the_save_plan_gather_is_a_checkpoint_hang_with_no_culprit() -> None:
    v = diagnosed(DEMO / "checkpoint_plan_gather_stuck.tar.gz").verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.CHECKPOINT), v.summary
    assert v.culprits == () and v.suspected and v.exit_code is ExitCode.WARNING, v.summary
    stall = _finding(v, "checkpoint-stall")
    assert stall.message.startswith(
        "All 2 rank(s) in the checkpoint wait in a collective of the save"
    ), stall.message
    assert "slime#1908" in stall.message and "storage" not in stall.message
    assert sorted(stall.evidence) == [
        f"train rank {r}: blocked in collective gather "
        "(torch/distributed/distributed_c10d.py:4667) in gather_object"
        for r in (0, 1)
    ]
    assert any("--async-save" in s for s in v.step_texts), v.next_steps


def test_a_health_check_queued_behind_the_weight_broadcast_is_named_not_blamed() -> None:
    v = diagnosed(DEMO / "weight_sync_health_check_queued.tar.gz").verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.NCCL_BROADCAST), v.summary
    wedged = "http://127.0.0.1:32137"  # engine 1: its scheduler wedged before the broadcast
    assert [c.engine_url for c in v.culprits] == [wedged], v.culprits
    queues = _finding(v, "ray_tasks.queues")
    assert queues.severity is Severity.INFO
    assert queues.evidence == (
        "engine actor http://127.0.0.1:32134: runs update_weights_from_distributed; "
        "queued: health_generate",
    )

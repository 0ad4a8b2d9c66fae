"""Issue 45 item 1: engines with several TP ranks, the demo's TP faults as recorded
(tests/fixtures/README.md):

- `startup_tp_rank_killed` (sglang PR#20287): the last TP rank SIGKILLed at launch, a zombie child
  of its engine's HTTP process (title gone, comm `sglang::schedul`), rank 0 in the TP group's
  rendezvous, a server that never listened: the culprit is the dead rank, in the engine slime's
  launch line names.
- `rollout_tp_rank_killed`: a TP rank SIGKILLed mid-rollout, SGLang's SubprocessWatchdog takes the
  engine down: the engine is dead, and its log says which child died and how.
- `rollout_tp_ranks_diverged` (sglang#27221): two ranks at the decode's result sync, two in
  `broadcast_pyobj`: the engine is named, no rank is blamed by the stacks alone."""

from __future__ import annotations

from pathlib import Path

from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.verdict import Role, Stage, Status

DEMO = Path(__file__).resolve().parents[1] / "fixtures/analysis/demo"


def test_a_rank_killed_at_launch_is_the_culprit_in_the_engine_its_launch_line_names() -> None:
    result = analyse_bundle(DEMO / "startup_tp_rank_killed.tar.gz")
    verdict = result.diagnosis.verdict
    assert (verdict.status, verdict.stage) == (Status.HUNG, Stage.STARTUP)
    [culprit] = verdict.culprits[:1]
    assert (culprit.role, culprit.pid) == (Role.SGLANG_ENGINE, 2474)  # the zombie TP1
    assert culprit.engine_url == "http://127.0.0.1:26146"  # slime's launch line, never served
    assert "scheduler (pid 2474)" in verdict.summary and "died" in verdict.summary
    members = {m.pid: m for m in result.topology.members}
    # its live peer, TP0 in the rendezvous, and the actor are of the same engine
    assert members[2472].engine_url == members[2138].engine_url == culprit.engine_url


def test_a_rank_killed_mid_rollout_leaves_a_dead_engine_and_its_watchdog_line() -> None:
    verdict = analyse_bundle(DEMO / "rollout_tp_rank_killed.tar.gz").diagnosis.verdict
    assert (verdict.status, verdict.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH)
    assert verdict.culprits[0].role is Role.SGLANG_ENGINE
    assert verdict.culprits[0].engine_url == "http://127.0.0.1:27128"
    crashed = [f for f in verdict.findings if f.rule == "log-engine-child-crashed"]
    assert crashed, [f.rule for f in verdict.findings]
    assert "sglang::scheduler_TP1 (pid 12751) was killed by signal 9" in crashed[0].message


def test_ranks_split_between_two_collectives_name_the_engine() -> None:
    verdict = analyse_bundle(DEMO / "rollout_tp_ranks_diverged.tar.gz").diagnosis.verdict
    assert (verdict.status, verdict.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH)
    assert [(c.role, c.engine_url) for c in verdict.culprits] == [
        (Role.SGLANG_ENGINE, "http://127.0.0.1:25991")
    ]


def test_with_native_stacks_rank0_is_named_in_a_collective_its_peers_never_enter() -> None:
    """The same hang with `--native` py-spy: TP0's frame holds the collective's wait, so the stacks
    name it as the rank its peers wait for, the peers in the request broadcast; no mismatch cause
    (ranks in broadcast_pyobj wait for requests, they are not a side)."""
    native = DEMO.parent / "demo_native" / "rollout_tp_ranks_diverged.tar.gz"
    verdict = analyse_bundle(native).diagnosis.verdict
    assert (verdict.status, verdict.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH)
    assert [c.role for c in verdict.culprits] == [Role.SGLANG_ENGINE]
    assert "scheduler TP0" in verdict.summary
    assert "waits in process_batch_result (blocked in collective" in verdict.summary
    assert "a collective its TP peers never enter: they wait in broadcast_pyobj" in verdict.summary
    assert "collective-mismatch-cause" not in {f.rule for f in verdict.findings}

"""Issue 45 item 1: engines with several TP ranks, the demo's TP faults as recorded
(tests/fixtures/README.md):

- `startup_tp_rank_killed` (sglang PR#20287): the last TP rank SIGKILLed at launch, a zombie child
  of its engine's HTTP process (title gone, comm `sglang::schedul`), rank 0 in the TP group's
  rendezvous, a server that never listened: the culprit is the dead rank, in the engine slime's
  launch line names.
- `rollout_tp_rank_killed`: a TP rank SIGKILLed mid-rollout, SGLang's SubprocessWatchdog takes the
  engine down: the engine is dead, and its log says which child died and how.
- `rollout_tp_ranks_diverged` (sglang#27221): two ranks at the decode's result sync, two in
  `broadcast_pyobj`: the engine is named, no rank is blamed by the stacks alone; with `--native`
  stacks (the ranks' collective wait in sight) the split is the headline, each side with its call
  site (`collective-mismatch-cause`).
- `rollout_tp_rank_prefetch_stuck` (sglang#30760): TP0 alone in a collective, its one peer in the
  request broadcast: no mismatch (the peer waits for TP0's next requests), TP0 is named."""

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


NATIVE = DEMO.parent / "demo_native"
SCHEDULER = "slime_hangdoctor_demo/sglang/srt/managers/scheduler.py"
RECEIVER = "slime_hangdoctor_demo/sglang/srt/managers/scheduler_components/request_receiver.py"


def test_ranks_split_between_two_collectives_name_the_engine() -> None:
    """Plain py-spy: ranks 0 and 1 show no collective frame (Gloo's wait is native, their Python
    frame is `process_batch_result`), so no side is formed and no rank is blamed: the engine."""
    verdict = analyse_bundle(DEMO / "rollout_tp_ranks_diverged.tar.gz").diagnosis.verdict
    assert (verdict.status, verdict.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH)
    assert [(c.role, c.engine_url) for c in verdict.culprits] == [
        (Role.SGLANG_ENGINE, "http://127.0.0.1:25991")
    ]
    assert verdict.culprits[0].by == ("parts/engines:engine_suspect",)
    assert "collective-mismatch-cause" not in {f.rule for f in verdict.findings}


def test_with_native_stacks_the_split_is_the_headline_with_both_call_sites() -> None:
    """The same hang with `--native` py-spy: ranks 0 and 1 wait in the decode's collective at both
    samples while ranks 2 and 3 wait in the request broadcast: peers mid-batch, so the intake is a
    side (sglang#27221: they aborted the batch on their own clocks). The headline is the
    mismatch, each side with the scheduler's line that issued its collective; nothing tells which
    side took the wrong path, so no rank is blamed: the culprit is the engine, stuck."""
    verdict = analyse_bundle(NATIVE / "rollout_tp_ranks_diverged.tar.gz").diagnosis.verdict
    assert (verdict.status, verdict.stage) == (Status.HUNG, Stage.ROLLOUT_DISPATCH)
    decode = f"c10d::Work::wait at {SCHEDULER}:345 (process_batch_result)"
    intake = f"broadcast_pyobj at {RECEIVER}:58 (_broadcast_reqs_across_ranks)"
    assert verdict.summary == (
        "Hung in rollout generation: the TP ranks of engine http://127.0.0.1:24147 wait in "
        "different collectives: scheduler TP0 (pid 20783), scheduler TP1 (pid 20785) in "
        f"{decode}; scheduler TP2 (pid 20786), scheduler TP3 (pid 20787) in {intake} (the "
        "request intake: waiting for the next batch) (nothing tells which side took the wrong "
        "path)"
    )
    assert verdict.extra["summary_by"] == "parts/stacks:collective_mismatch"
    cause = next(f for f in verdict.findings if f.rule == "collective-mismatch-cause")
    assert cause.evidence[0] == (
        f"scheduler TP0 (pid 20783), scheduler TP1 (pid 20785): in {decode} (both samples)"
    )
    assert cause.evidence[1].startswith(
        f"scheduler TP2 (pid 20786), scheduler TP3 (pid 20787): in {intake}"
    )
    # no rank is blamed: the one culprit is the engine (requests in flight, no token produced),
    # named by its TP0 as every engine culprit is; no stacks rule names a rank
    [culprit] = verdict.culprits
    assert (culprit.role, culprit.engine_url) == (Role.SGLANG_ENGINE, "http://127.0.0.1:24147")
    assert culprit.by == ("parts/engines:engine_suspect",)
    assert "stacks:" not in culprit.why


def test_rank_0_alone_in_a_collective_is_the_one_its_peers_wait_for() -> None:
    """sglang#30760: TP0 in the prefetch check's all_reduce, TP1 in the request broadcast. No peer
    of TP1's (a receiver of the broadcast) is mid-batch: TP1 waits for TP0's next requests, and
    the odd scheduler TP0 is named; no mismatch."""
    verdict = analyse_bundle(DEMO / "rollout_tp_rank_prefetch_stuck.tar.gz").diagnosis.verdict
    assert verdict.culprits[0].pid == 24238  # TP0
    assert "parts/stacks:_awaited_by_intake" in verdict.culprits[0].by
    assert "collective-mismatch-cause" not in {f.rule for f in verdict.findings}

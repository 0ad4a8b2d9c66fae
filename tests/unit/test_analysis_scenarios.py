"""Whole-job scenarios of slime.md §5 / §8: each checks status, blocked stage, culprit and the known
cause the evidence should link.

The stacks (and the process rows of the dead-engine case) are real: each scenario takes the py-spy
dumps of the processes a recorded demo bundle holds for that shape (tests/unit/recorded_shapes.py;
provenance rows in tests/fixtures/README.md), selected and named by their recorded pids. The
topology, Ray answers and SGLang readings around them are constructed (analysis_builders.py), so
each test isolates the rule that reads the stacks.
"""

from __future__ import annotations

from pathlib import Path

from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.pyspy import parse_pyspy_json
from slime_hangdoctor.parsers.sglang import EngineLoad, ServerInfo, SglangMetrics
from slime_hangdoctor.topology import Engine, Topology
from slime_hangdoctor.verdict import Diagnosis, Role, Stage, Status
from tests.unit import recorded_shapes as rs
from tests.unit.analysis_builders import (
    NODE,
    actor,
    http,
    member,
    running_job,
    snapshot,
    topology,
)
from tests.unit.recorded_stacks import as_obs

DRIVER = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "driver-own-code"
URL0 = f"http://{NODE}:15000"
URL1 = f"http://{NODE}:15001"

# demo fault reward_hang: rollout 1's reward stuck in sympy on the RolloutManager's asyncio loop.
REWARD = rs.bundle("demo/reward_hang")
REWARD_PIDS = {"driver": 4546, "rm": 4581, "t0": 4728, "t1": 4783, "e0": 4631, "e0 server": 4700}
REWARD_PIDS["e0 scheduler"] = 4707
# demo fault engine_server_killed: engine 1's server died at its first /generate; the rollout waits.
KILLED = rs.bundle("demo/engine_server_killed")
KILLED_PIDS = {"driver": 22749, "rm": 22793, "t0": 22950, "t1": 23034, "e0": 22827}
KILLED_PIDS |= {"e0 server": 22895, "e0 scheduler": 22900}
# demo fault slow: a healthy rollout with long generations (tokens keep flowing).
SLOW = rs.bundle("demo/slow")
SLOW_PIDS = {"driver": 12122, "rm": 12156, "t0": 12300, "t1": 12357, "e0": 12208}
SLOW_PIDS |= {"e0 server": 12268, "e0 scheduler": 12272}


def _diag(snap: object, topo: Topology) -> Diagnosis:
    return diagnose(snap, topo)  # type: ignore[arg-type]


def _rollout_members(p: dict[str, int]) -> list:  # type: ignore[type-arg]
    return [
        member(Role.DRIVER, p["driver"], "driver"),
        member(
            Role.ROLLOUT_MANAGER, p["rm"], cls="RolloutManager", method="generate", actor_id="rm"
        ),
        member(Role.TRAIN_RANK, p["t0"], cls="MegatronTrainRayActor", rank=0, actor_id="t0"),
        member(Role.TRAIN_RANK, p["t1"], cls="MegatronTrainRayActor", rank=1, actor_id="t1"),
        member(Role.SGLANG_ENGINE, p["e0"], cls="SGLangEngine", url=URL0, actor_id="e0"),
        member(Role.SGLANG_ENGINE, p["e0 server"], "http_server", url=URL0, actor_id="e0"),
        member(Role.SGLANG_ENGINE, p["e0 scheduler"], "scheduler", url=URL0, actor_id="e0"),
    ]


def _engine0(p: dict[str, int]) -> Engine:
    return Engine(URL0, NODE, p["e0"], p["e0 server"])


# --------------------------------------------------------------------------- rollout


def test_reward_hang_blames_the_rollout_manager_loop() -> None:
    p = REWARD_PIDS
    snap = snapshot(
        stacks=rs.stacks(REWARD, *p.values()),
        http=(
            http(
                URL0,
                "/metrics",
                200,
                SglangMetrics(decode_tokens_total=5000, running_reqs=0, queue_reqs=0),
                sample=0,
            ),
            http(
                URL0,
                "/metrics",
                200,
                SglangMetrics(decode_tokens_total=5000, running_reqs=0, queue_reqs=0),
                sample=1,
            ),
        ),
        jobs=(running_job(p["driver"]),),
    )
    v = _diag(snap, topology(*_rollout_members(p), engines=[_engine0(p)])).verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.REWARD
    assert [c.role for c in v.culprits] == [Role.ROLLOUT_MANAGER]
    assert v.culprits[0].pid == p["rm"]
    rules = {f.rule for f in v.findings}
    assert "known-sympy-reward-hang" in rules
    assert any(f"py-spy dump --locals --pid {p['rm']}" in s for s in v.step_texts)
    assert v.suspected  # a slow reward looks the same over a short window


def test_dead_engine_during_rollout() -> None:
    """Engine 0's server and scheduler were listed at sample 0 and are gone at sample 1 (the
    recorded tables; the second as read once they had exited, `transforms.processes_without`),
    while its URL refuses in both samples."""
    p = KILLED_PIDS
    refused = "connection refused"
    snap = snapshot(
        stacks=rs.stacks(KILLED, p["driver"], p["rm"], p["t0"], p["t1"]),
        http=tuple(
            http(URL0, path, None, sample=s, error=refused, outcome=Outcome.UNAVAILABLE)
            for s in (0, 1)
            for path in ("/model_info", "/metrics", "/server_info")
        ),
        processes=(
            rs.processes(KILLED, 0),
            rs.processes(KILLED, 1, without=frozenset({p["e0 server"], p["e0 scheduler"]})),
        ),
        jobs=(running_job(p["driver"]),),
    )
    d = _diag(snap, topology(*_rollout_members(p), engines=[_engine0(p)]))
    v = d.verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.ROLLOUT_DISPATCH
    assert v.culprits[0].role is Role.SGLANG_ENGINE
    assert v.culprits[0].engine_url == URL0
    assert any(r.culprit and r.role is Role.SGLANG_ENGINE for r in d.rows)
    assert any("dead" in r.state for r in d.rows if r.pid == p["e0 server"])


def test_healthy_rollout_with_moving_tokens_is_progressing() -> None:
    p = SLOW_PIDS
    snap = snapshot(
        stacks=rs.stacks(SLOW, *p.values()),
        http=(
            http(
                URL0,
                "/metrics",
                200,
                SglangMetrics(decode_tokens_total=1000, running_reqs=64, queue_reqs=10),
                sample=0,
            ),
            http(
                URL0,
                "/metrics",
                200,
                SglangMetrics(decode_tokens_total=9000, running_reqs=64, queue_reqs=3),
                sample=1,
            ),
        ),
        jobs=(running_job(p["driver"]),),
    )
    v = _diag(snap, topology(*_rollout_members(p), engines=[_engine0(p)])).verdict
    assert v.status is Status.PROGRESSING
    assert v.stage is Stage.NONE
    assert v.culprits == ()
    assert "decode tokens +8000" in v.summary
    assert v.extra["current_stage"] == "rollout_dispatch"


def test_stuck_engine_with_requests_in_flight_during_eval() -> None:
    rm = 9298  # demo fault eval_hang: the RolloutManager in `eval`, its loop idle
    metrics = SglangMetrics(
        decode_tokens_total=777, generation_tokens_total=50, running_reqs=12, queue_reqs=0
    )
    snap = snapshot(
        stacks=rs.stacks(rs.bundle("demo/eval_hang"), rm),
        http=(
            http(URL0, "/metrics", 200, metrics, sample=0),
            http(URL0, "/metrics", 200, metrics, sample=1),
            http(URL0, "/v1/loads", 200, EngineLoad(running=12, waiting=0, ranks=1), sample=1),
            http(
                URL1,
                "/metrics",
                200,
                SglangMetrics(decode_tokens_total=10, running_reqs=0, queue_reqs=0),
                sample=0,
            ),
            http(
                URL1,
                "/metrics",
                200,
                SglangMetrics(decode_tokens_total=10, running_reqs=0, queue_reqs=0),
                sample=1,
            ),
        ),
        jobs=(running_job(),),
    )
    topo = topology(
        member(Role.ROLLOUT_MANAGER, rm, cls="RolloutManager", method="eval"),
        engines=[Engine(URL0, NODE), Engine(URL1, NODE)],
    )
    v = _diag(snap, topo).verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.EVAL
    assert [c.engine_url for c in v.culprits] == [URL0]
    assert any("12 requests in flight" in e for f in v.findings for e in f.evidence)


# --------------------------------------------------------------------------- weight sync

# demo fault weight_sync_engine_missing: train rank 0 in the weight broadcast (dist.broadcast),
# rank 1 in the barrier after it, engine 1's scheduler idle in recv_requests (the update call that
# would have joined it never came).
MISSING = rs.bundle("demo/weight_sync_engine_missing")
RANK0_BROADCAST, RANK1_BARRIER, IDLE_SCHEDULER = 30272, 30339, 30213


def test_engine_scheduler_stuck_during_weight_broadcast() -> None:
    snap = snapshot(
        stacks=rs.stacks(MISSING, RANK0_BROADCAST, RANK1_BARRIER, IDLE_SCHEDULER),
        http=(
            http(URL0, "/server_info", 200, ServerInfo(internal_states_count=0), sample=1),
            http(URL0, "/v1/loads", 200, EngineLoad(running=0, waiting=0), sample=1),
        ),
        jobs=(running_job(),),
    )
    topo = topology(
        member(
            Role.TRAIN_RANK,
            RANK0_BROADCAST,
            cls="MegatronTrainRayActor",
            method="update_weights",
            rank=0,
        ),
        member(
            Role.TRAIN_RANK,
            RANK1_BARRIER,
            cls="MegatronTrainRayActor",
            method="update_weights",
            rank=1,
        ),
        member(Role.SGLANG_ENGINE, IDLE_SCHEDULER, "scheduler", url=URL0, actor_id="e0"),
        engines=[Engine(URL0, NODE)],
    )
    v = _diag(snap, topo).verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.NCCL_BROADCAST
    assert v.culprits[0].role is Role.SGLANG_ENGINE
    assert v.culprits[0].engine_url == URL0
    assert any(f"py-spy dump --native --pid {IDLE_SCHEDULER}" in s for s in v.step_texts)


def test_pp_weight_group_creation_deadlock() -> None:
    """slime PR#2331: the train ranks wait in the weight group's rendezvous
    (`connect_rollout_engines_pp_concurrently` -> `init_process_group`) while each engine's actor
    waits on its own `init_weights_update_group` call (demo fault actor_queue_cycle, one sample)."""
    cycle = rs.bundle("demo/actor_queue_cycle")
    ranks, engines = (22247, 22353), (21687, 21688)
    topo = topology(
        *(
            member(
                Role.TRAIN_RANK, pid, cls="MegatronTrainRayActor", method="update_weights", rank=r
            )
            for r, pid in enumerate(ranks)
        ),
        *(
            member(
                Role.SGLANG_ENGINE,
                pid,
                cls="SGLangEngine",
                method="init_weights_update_group",
                url=u,
            )
            for pid, u in zip(engines, (URL0, URL1), strict=True)
        ),
    )
    snap = snapshot(samples=1, stacks=rs.stacks(cycle, *ranks, *engines, samples=(0,)))
    v = _diag(snap, topo).verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.WEIGHT_SYNC
    # the stacks alone: no PP size, no group names, no task list: only similar to slime PR#2331
    # (the full evidence: tests/unit/test_analysis_known_causes.py)
    rules = {f.rule for f in v.findings}
    assert "similar-pp-weight-group-deadlock" in rules
    assert "known-pp-weight-group-deadlock" not in rules


# --------------------------------------------------------------------------- startup, driver


def test_engine_never_healthy_at_startup() -> None:
    """demo fault startup_engine_never_healthy (analysis/demo_shapes/): the driver in
    `create_rollout_manager`, the RolloutManager in its constructor waiting on
    `init_rollout_engines`, engine 1's actor in `SGLangEngine.init` -> `_wait_server_healthy`
    (one sample)."""
    startup = rs.bundle("demo_shapes/startup_engine_never_healthy")
    driver, rm, engine = 12738, 12899, 12986
    snap = snapshot(
        stacks=rs.stacks(startup, driver, rm, engine, samples=(0,)),
        jobs=(running_job(driver),),
        samples=1,
    )
    topo = topology(
        member(Role.DRIVER, driver, "driver"),
        member(Role.ROLLOUT_MANAGER, rm, cls="RolloutManager", method="__init__"),
        member(Role.SGLANG_ENGINE, engine, cls="SGLangEngine", method="init", url=URL0),
    )
    v = _diag(snap, topo).verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.STARTUP
    assert "known-engine-never-healthy" in {f.rule for f in v.findings}
    assert v.confidence != "high"


def test_driver_is_the_culprit_when_every_actor_is_idle() -> None:
    """Recorded (real/driver-own-code): a real driver process (`python3 train.py`) in `save` of its
    own train loop, two py-spy dumps 1 s apart; the actors' idle stacks are recorded too (demo fault
    reward_service_stuck's train ranks, waiting for a task in Ray's main loop)."""
    idle = rs.bundle("demo/reward_service_stuck")
    rank0, rank1 = 16590, 16650
    stacks = [
        as_obs(100, s, *parse_pyspy_json((DRIVER / f"driver.sample{s}.json").read_text()).threads)
        for s in (0, 1)
    ]
    assert [f.name for f in stacks[0].stack.threads[0].frames] == ["save", "train", "<module>"]
    topo = topology(
        member(Role.DRIVER, 100, "driver"),
        member(Role.ROLLOUT_MANAGER, rank1, cls="RolloutManager"),
        member(Role.TRAIN_RANK, rank0, cls="MegatronTrainRayActor", rank=0),
    )
    snap = snapshot(stacks=(*stacks, *rs.stacks(idle, rank0, rank1)), jobs=(running_job(),))
    v = _diag(snap, topo).verdict
    assert v.status is Status.HUNG
    assert [c.role for c in v.culprits] == [Role.DRIVER]


def test_dead_train_actor_of_the_running_job() -> None:
    snap = snapshot(
        stacks=rs.stacks(MISSING, RANK1_BARRIER),
        actors=(
            actor("t0", "MegatronTrainRayActor", RANK0_BROADCAST, "DEAD"),
            actor("t1", "MegatronTrainRayActor", RANK1_BARRIER),
        ),
        jobs=(running_job(),),
    )
    topo = topology(
        member(Role.TRAIN_RANK, RANK1_BARRIER, cls="MegatronTrainRayActor", rank=1, actor_id="t1")
    )
    v = _diag(snap, topo).verdict
    assert v.status is Status.HUNG
    assert v.culprits[0].actor_id == "t0"
    assert v.culprits[0].role is Role.TRAIN_RANK


# --------------------------------------------------------------------------- idle / unknown


def test_no_job_is_idle() -> None:
    snap = snapshot(samples=1, actors=(actor("x", "JobSupervisor", 50),))
    v = _diag(snap, Topology()).verdict
    assert v.status is Status.IDLE
    assert int(v.exit_code) == 0


def test_nothing_collected_is_unknown() -> None:
    v = _diag(snapshot(samples=1, ray_seen=False), Topology()).verdict
    assert v.status is Status.UNKNOWN
    assert int(v.exit_code) == 3

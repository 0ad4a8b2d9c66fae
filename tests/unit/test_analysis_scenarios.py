"""Whole-job scenarios of slime.md §5 / §8 built from constructed facts (analysis_builders.py):
each checks status, blocked stage, culprit and the known cause the evidence should link."""

from __future__ import annotations

from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.facts import EngineLoad, Outcome, ServerInfo, SglangMetrics
from slime_hangdoctor.topology import Engine, Topology
from slime_hangdoctor.verdict import Diagnosis, Role, Stage, Status
from tests.unit.analysis_builders import (
    GC_THREAD,
    IDLE_ACTOR,
    LOOP_FRAMES,
    NODE,
    RAY_GET,
    RM_GENERATE_FRAMES,
    F,
    actor,
    actor_main,
    http,
    member,
    proc,
    procs_obs,
    running_job,
    snapshot,
    stack_obs,
    thread,
    topology,
)

URL0 = f"http://{NODE}:15000"
URL1 = f"http://{NODE}:15001"
ROLLOUT = "slime/ray/rollout.py"
UWD = "slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py"
ENGINE = "slime/backends/sglang_utils/sglang_engine.py"
ACTOR = "slime/backends/megatron_utils/actor.py"

DRIVER_IN_TRAIN = thread((*RAY_GET, F("train", "train.py", 60), F("<module>", "train.py", 90)))
RM_MAIN_GENERATE = actor_main(*RM_GENERATE_FRAMES)
LOOP_IDLE = thread(LOOP_FRAMES, name="Thread-3 (_start_loop)", tid=7)
LOOP_SYMPY = thread(
    (
        F("Expr.__mul__", "sympy/core/expr.py", 215),
        F("simplify", "sympy/simplify/simplify.py", 640),
        F("are_equal_under_sympy", "slime/rollout/rm_hub/math_utils.py", 350),
        F("grade_answer_verl", "slime/rollout/rm_hub/math_utils.py", 490),
        F("async_rm", "slime/rollout/rm_hub/__init__.py", 45),
        F("generate_and_rm", "slime/rollout/sglang_rollout.py", 230),
        F("Handle._run", "asyncio/events.py", 84),
        F("BaseEventLoop._run_once", "asyncio/base_events.py", 1936),
        F("BaseEventLoop.run_forever", "asyncio/base_events.py", 608),
        F("AsyncLoopThread._start_loop", "slime/utils/async_utils.py", 16),
    ),
    name="Thread-3 (_start_loop)",
    active=True,
    tid=7,
)


def _diag(snap: object, topo: Topology) -> Diagnosis:
    return diagnose(snap, topo)  # type: ignore[arg-type]


def _rollout_members() -> list:  # type: ignore[type-arg]
    return [
        member(Role.DRIVER, 100, "driver"),
        member(Role.ROLLOUT_MANAGER, 200, cls="RolloutManager", method="generate", actor_id="rm"),
        member(Role.TRAIN_RANK, 300, cls="MegatronTrainRayActor", rank=0, actor_id="t0"),
        member(Role.TRAIN_RANK, 301, cls="MegatronTrainRayActor", rank=1, actor_id="t1"),
        member(Role.SGLANG_ENGINE, 400, cls="SGLangEngine", url=URL0, actor_id="e0"),
        member(Role.SGLANG_ENGINE, 410, "http_server", url=URL0, actor_id="e0"),
        member(Role.SGLANG_ENGINE, 411, "scheduler", url=URL0, actor_id="e0"),
    ]


def _rollout_stacks(sample: int, loop: object = LOOP_IDLE) -> list:  # type: ignore[type-arg]
    return [
        stack_obs(100, DRIVER_IN_TRAIN, sample=sample),
        stack_obs(200, RM_MAIN_GENERATE, loop, sample=sample),  # type: ignore[arg-type]
        stack_obs(
            300, thread(IDLE_ACTOR), thread(GC_THREAD, name="PythonGCThread", tid=9), sample=sample
        ),
        stack_obs(301, thread(IDLE_ACTOR), sample=sample),
    ]


# --------------------------------------------------------------------------- rollout


def test_reward_hang_blames_the_rollout_manager_loop() -> None:
    snap = snapshot(
        stacks=tuple(_rollout_stacks(0, LOOP_SYMPY) + _rollout_stacks(1, LOOP_SYMPY)),
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
        jobs=(running_job(),),
    )
    v = _diag(snap, topology(*_rollout_members(), engines=[Engine(URL0, NODE, 400, 410)])).verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.REWARD
    assert [c.role for c in v.culprits] == [Role.ROLLOUT_MANAGER]
    assert v.culprits[0].pid == 200
    rules = {f.rule for f in v.findings}
    assert "known-sympy-reward-hang" in rules
    assert any("py-spy dump --locals --pid 200" in s for s in v.next_steps)
    assert v.suspected  # a slow reward looks the same over a short window


def test_dead_engine_during_rollout() -> None:
    refused = "connection refused"
    snap = snapshot(
        stacks=tuple(_rollout_stacks(0) + _rollout_stacks(1)),
        http=tuple(
            http(URL0, path, None, sample=s, error=refused, outcome=Outcome.UNAVAILABLE)
            for s in (0, 1)
            for path in ("/model_info", "/metrics", "/server_info")
        ),
        processes=(
            procs_obs(
                0,
                proc(410, "python3 -c from multiprocessing.spawn import spawn_main"),
                proc(411, "sglang::scheduler"),
            ),
            procs_obs(1, proc(100, "python3 train.py")),
        ),
        jobs=(running_job(),),
    )
    d = _diag(snap, topology(*_rollout_members(), engines=[Engine(URL0, NODE, 400, 410)]))
    v = d.verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.ROLLOUT_DISPATCH
    assert v.culprits[0].role is Role.SGLANG_ENGINE
    assert v.culprits[0].engine_url == URL0
    assert any(r.culprit and r.role is Role.SGLANG_ENGINE for r in d.rows)
    assert any("dead" in r.state for r in d.rows if r.pid == 410)


def test_healthy_rollout_with_moving_tokens_is_progressing() -> None:
    snap = snapshot(
        stacks=tuple(_rollout_stacks(0) + _rollout_stacks(1)),
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
        jobs=(running_job(),),
    )
    v = _diag(snap, topology(*_rollout_members(), engines=[Engine(URL0, NODE, 400, 410)])).verdict
    assert v.status is Status.PROGRESSING
    assert v.stage is Stage.NONE
    assert v.culprits == ()
    assert "decode tokens +8000" in v.summary
    assert v.extra["current_stage"] == "rollout_dispatch"


def test_stuck_engine_with_requests_in_flight_during_eval() -> None:
    eval_main = actor_main(
        F("Condition.wait", "threading.py"),
        F("Future.result", "concurrent/futures/_base.py"),
        F("run", "slime/utils/async_utils.py"),
        F("generate_rollout", "slime/rollout/sglang_rollout.py"),
        F("call_rollout_fn", "slime/rollout/base_types.py"),
        F("RolloutManager.eval", ROLLOUT),
    )
    stacks = [stack_obs(200, eval_main, LOOP_IDLE, sample=s) for s in (0, 1)]
    metrics = SglangMetrics(
        decode_tokens_total=777, generation_tokens_total=50, running_reqs=12, queue_reqs=0
    )
    snap = snapshot(
        stacks=tuple(stacks),
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
        member(Role.ROLLOUT_MANAGER, 200, cls="RolloutManager", method="eval"),
        engines=[Engine(URL0, NODE), Engine(URL1, NODE)],
    )
    v = _diag(snap, topo).verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.EVAL
    assert [c.engine_url for c in v.culprits] == [URL0]
    assert any("12 requests in flight" in e for f in v.findings for e in f.evidence)


# --------------------------------------------------------------------------- weight sync


def _trainer_broadcast(pid_rank0: int = 300) -> object:
    return actor_main(
        *RAY_GET,
        F("update_weights_from_distributed", UWD, 340),
        F("UpdateWeightFromDistributed._update_bucket_weights_from_distributed", UWD, 255),
        F("UpdateWeightFromDistributed._send_weights", UWD, 146),
        F("UpdateWeightFromDistributed.update_weights", UWD, 125),
        F("MegatronTrainRayActor.update_weights", ACTOR, 640),
    )


def _trainer_barrier() -> object:
    return actor_main(
        F("barrier", "torch/distributed/distributed_c10d.py", 4200),
        F("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83),
        F("UpdateWeightFromDistributed.update_weights", UWD, 134),
        F("MegatronTrainRayActor.update_weights", ACTOR, 640),
    )


def test_engine_scheduler_stuck_during_weight_broadcast() -> None:
    idle_sched = thread(
        (
            F("Scheduler.recv_requests", "sglang/srt/managers/scheduler.py", 1100),
            F("Scheduler.event_loop_overlap", "sglang/srt/managers/scheduler.py", 900),
            F("run_scheduler_process", "sglang/srt/managers/scheduler.py", 3000),
        ),
        active=True,
    )
    stacks = []
    for s in (0, 1):
        stacks += [
            stack_obs(300, _trainer_broadcast(), sample=s),  # type: ignore[arg-type]
            stack_obs(301, _trainer_barrier(), sample=s),  # type: ignore[arg-type]
            stack_obs(411, idle_sched, sample=s),
        ]
    snap = snapshot(
        stacks=tuple(stacks),
        http=(
            http(URL0, "/server_info", 200, ServerInfo(internal_states_count=0), sample=1),
            http(URL0, "/v1/loads", 200, EngineLoad(running=0, waiting=0), sample=1),
        ),
        jobs=(running_job(),),
    )
    topo = topology(
        member(Role.TRAIN_RANK, 300, cls="MegatronTrainRayActor", method="update_weights", rank=0),
        member(Role.TRAIN_RANK, 301, cls="MegatronTrainRayActor", method="update_weights", rank=1),
        member(Role.SGLANG_ENGINE, 411, "scheduler", url=URL0, actor_id="e0"),
        engines=[Engine(URL0, NODE)],
    )
    v = _diag(snap, topo).verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.NCCL_BROADCAST
    assert v.culprits[0].role is Role.SGLANG_ENGINE
    assert v.culprits[0].engine_url == URL0
    assert any("py-spy dump --native --pid 411" in s for s in v.next_steps)


def test_pp_weight_group_creation_deadlock() -> None:
    rendezvous = [
        F("_store_based_barrier", "torch/distributed/distributed_c10d.py", 4400),
        F("init_process_group", "slime/utils/distributed_utils.py", 80),
        F("connect_rollout_engines_from_distributed", UWD, 300),
        F("UpdateWeightFromDistributed.connect_rollout_engines", UWD, 80),
        F("MegatronTrainRayActor.update_weights", ACTOR, 620),
    ]
    engine_busy = actor_main(
        F("SSLSocket.recv_into", "ssl.py"),
        F("SGLangEngine._make_request", ENGINE, 215),
        F("SGLangEngine.init_weights_update_group", ENGINE, 380),
    )
    stacks = [
        stack_obs(300, actor_main(*rendezvous)),
        stack_obs(302, actor_main(*rendezvous)),
        stack_obs(400, engine_busy),
        stack_obs(401, engine_busy),
    ]
    topo = topology(
        member(Role.TRAIN_RANK, 300, cls="MegatronTrainRayActor", method="update_weights", rank=0),
        member(Role.TRAIN_RANK, 302, cls="MegatronTrainRayActor", method="update_weights", rank=2),
        member(
            Role.SGLANG_ENGINE,
            400,
            cls="SGLangEngine",
            method="init_weights_update_group",
            url=URL0,
        ),
        member(
            Role.SGLANG_ENGINE,
            401,
            cls="SGLangEngine",
            method="init_weights_update_group",
            url=URL1,
        ),
    )
    v = _diag(snapshot(samples=1, stacks=tuple(stacks), jobs=(running_job(),)), topo).verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.WEIGHT_SYNC
    assert "known-pp-weight-group-deadlock" in {f.rule for f in v.findings}


# --------------------------------------------------------------------------- startup, driver


def test_engine_never_healthy_at_startup() -> None:
    stacks = [
        stack_obs(
            100,
            thread(
                (
                    *RAY_GET,
                    F("create_rollout_manager", "slime/ray/placement_group.py"),
                    F("train", "train.py"),
                )
            ),
        ),
        stack_obs(
            200,
            actor_main(
                *RAY_GET, F("init_rollout_engines", ROLLOUT), F("RolloutManager.__init__", ROLLOUT)
            ),
        ),
        stack_obs(
            400,
            actor_main(
                F("_wait_server_healthy", ENGINE, 100),
                F("SGLangEngine._init_normal", ENGINE),
                F("SGLangEngine.init", ENGINE),
            ),
        ),
    ]
    snap = snapshot(stacks=tuple(stacks), jobs=(running_job(),), samples=1)
    topo = topology(
        member(Role.DRIVER, 100, "driver"),
        member(Role.ROLLOUT_MANAGER, 200, cls="RolloutManager", method="__init__"),
        member(Role.SGLANG_ENGINE, 400, cls="SGLangEngine", method="init", url=URL0),
    )
    v = _diag(snap, topo).verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.STARTUP
    assert "known-engine-never-healthy" in {f.rule for f in v.findings}
    assert v.confidence != "high"


def test_driver_is_the_culprit_when_every_actor_is_idle() -> None:
    driver = thread((F("save", "train.py", 52), F("train", "train.py", 70)))
    stacks = [stack_obs(100, driver, sample=s) for s in (0, 1)] + [
        stack_obs(pid, thread(IDLE_ACTOR), sample=s) for pid in (200, 300) for s in (0, 1)
    ]
    topo = topology(
        member(Role.DRIVER, 100, "driver"),
        member(Role.ROLLOUT_MANAGER, 200, cls="RolloutManager"),
        member(Role.TRAIN_RANK, 300, cls="MegatronTrainRayActor", rank=0),
    )
    v = _diag(snapshot(stacks=tuple(stacks), jobs=(running_job(),)), topo).verdict
    assert v.status is Status.HUNG
    assert [c.role for c in v.culprits] == [Role.DRIVER]


def test_dead_train_actor_of_the_running_job() -> None:
    stacks = [stack_obs(301, _trainer_barrier(), sample=s) for s in (0, 1)]  # type: ignore[arg-type]
    snap = snapshot(
        stacks=tuple(stacks),
        actors=(
            actor("t0", "MegatronTrainRayActor", 300, "DEAD"),
            actor("t1", "MegatronTrainRayActor", 301),
        ),
        jobs=(running_job(),),
    )
    topo = topology(
        member(Role.TRAIN_RANK, 301, cls="MegatronTrainRayActor", rank=1, actor_id="t1")
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

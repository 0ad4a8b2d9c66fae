"""Issue 16: diagnosis misses on slime-shaped hangs.

Class 1: an engine that never turns healthy while the RolloutManager is still being constructed is
a start-up hang, whatever stage the engine's own scheduler loop shows. Class 2: an engine whose
server is gone is dead and the culprit. Class 3: in a weight broadcast where every engine is
unresponsive, the engine whose scheduler is not in the broadcast its peer engines wait in is the
culprit, with or without trainer stacks that wait in the collective. Class 4: requests lost
between the RolloutManager and the engines.

Every stack, process row and worker-log head here is recorded (tests/unit/recorded_shapes.py and
tests/unit/demo_bundles.py; provenance in tests/fixtures/README.md), selected by its recorded pid;
a world composed from several recordings moves a process to its pid with a named transformation.
The HTTP answers, router lists, Ray actor and task rows and sockets around them are constructed
(analysis_builders.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.pyspy import StackObs, ThreadStack
from slime_hangdoctor.parsers.ray_state import RayTask, TaskPageObs
from slime_hangdoctor.parsers.sglang import EngineLoad, ServerInfo
from slime_hangdoctor.parsers.sockets import TcpConnection, TcpSocket
from slime_hangdoctor.source_spec import Observed
from slime_hangdoctor.topology import Engine, Topology
from slime_hangdoctor.verdict import Diagnosis, Role, Stage, Status
from tests.fixtures import transforms as tf
from tests.unit import recorded_shapes as rs
from tests.unit.analysis_builders import (
    NODE,
    actor,
    http,
    member,
    running_job,
    snapshot,
    stack_obs,
    topology,
)
from tests.unit.demo_bundles import WEDGED_PIDS, recorded_main_thread, wedged_bundle

NODE2 = "192.0.2.3"
URL0 = f"http://{NODE}:15000"
URL1 = f"http://{NODE}:15001"
ROLLOUT = "slime/ray/rollout.py"
ENGINE = "slime/backends/sglang_utils/sglang_engine.py"
UWD = "slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py"
ACTOR = "slime/backends/megatron_utils/actor.py"
SCHED = "sglang/srt/managers/scheduler.py"
RUNNER = "sglang/srt/model_executor/model_runner.py"


def _diag(snap: object, topo: Topology) -> Diagnosis:
    return diagnose(snap, topo)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- class 1: start-up

# Recorded: demo fault startup_engine_never_healthy (analysis/demo_shapes/, with the RolloutManager's
# constructor dumped): the driver in `create_rollout_manager` (12738), the RolloutManager in
# `RolloutManager.__init__` -> `init_rollout_engines` -> `ray.get` (12899), engine 1's actor in
# `SGLangEngine.init` -> `_wait_server_healthy` (12986). Its scheduler is taken from demo fault
# rollout_engine_stuck (2870: wedged in `ModelRunner.forward_decode` -> `_synchronize`), the stage a
# warm-up request that never ends shows; each is moved to this world's pid.
STARTUP = rs.bundle("demo_shapes/startup_engine_never_healthy")
ENGINE_STUCK = rs.bundle("demo/rollout_engine_stuck")
Recording = tuple[Path, int]
DRIVER_IN_CREATE_ROLLOUT_MANAGER: Recording = (STARTUP, 12738)
DRIVER_IN_TRAIN_LOOP: Recording = (rs.bundle("demo/engine_server_killed"), 22749)


def _startup_snapshot(
    with_rm_stack: bool, rm_state: str, driver: Recording | None
) -> tuple[object, Topology]:
    """`driver=None`: only the engine's scheduler was dumped (py-spy read none of the Ray
    workers), so no stack shows start-up and Ray's actor state alone can say it."""
    stacks: list[StackObs] = []
    for s in (0, 1):
        stacks.append(rs.stack(ENGINE_STUCK, 2870, s, as_pid=411))
        if driver is not None:
            stacks += [
                rs.stack(driver[0], driver[1], s, as_pid=100),
                rs.stack(STARTUP, 12986, s, as_pid=401),
            ]
        if with_rm_stack:
            stacks.append(rs.stack(STARTUP, 12899, s, as_pid=200))
    snap = snapshot(
        stacks=tuple(stacks),
        http=(
            http(
                URL1,
                "/health",
                None,
                error="timed out after 2.0s",
                sample=1,
                outcome=Outcome.TIMED_OUT,
            ),
            http(URL1, "/server_info", 200, ServerInfo(internal_states_count=0), sample=1),
            http(URL1, "/v1/loads", 200, EngineLoad(running=1, waiting=0), sample=1),
        ),
        jobs=(running_job(),),
        actors=(
            actor("rm", "RolloutManager", 200, state=rm_state),
            actor("e1", "SGLangEngine", 401),
        ),
    )
    topo = topology(
        member(Role.DRIVER, 100, "driver"),
        member(Role.ROLLOUT_MANAGER, 200, cls="RolloutManager", actor_id="rm"),
        member(Role.SGLANG_ENGINE, 401, cls="SGLangEngine", method="init", url=URL1, actor_id="e1"),
        member(Role.SGLANG_ENGINE, 411, "scheduler", url=URL1, actor_id="e1"),
        engines=[Engine(URL1, NODE)],
    )
    return snap, topo


DRIVER_NONCOLOCATE = DRIVER_IN_CREATE_ROLLOUT_MANAGER
DRIVER_COLOCATE = DRIVER_NONCOLOCATE  # slime creates the RolloutManager first in both layouts


@pytest.mark.parametrize(
    ("with_rm_stack", "rm_state", "driver"),
    [
        (True, "PENDING_CREATION", DRIVER_NONCOLOCATE),
        (False, "PENDING_CREATION", DRIVER_COLOCATE),  # the RM's stack missing
        (False, "PENDING_CREATION", None),  # no stack shows start-up: Ray state says it
        (True, "ALIVE", DRIVER_NONCOLOCATE),  # Ray state not read: the constructor frames say it
    ],
)
def test_engine_whose_warmup_never_ends_is_a_startup_hang(
    with_rm_stack: bool, rm_state: str, driver: Recording | None
) -> None:
    snap, topo = _startup_snapshot(with_rm_stack, rm_state, driver)
    v = _diag(snap, topo).verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.STARTUP, v.summary
    assert v.culprits[0].role is Role.SGLANG_ENGINE and v.culprits[0].engine_url == URL1


def test_without_any_startup_frame_the_engine_stage_stands() -> None:
    """Control: the same stuck engine after start-up (driver in the train loop, RM created) is
    a rollout hang: the start-up rule needs a constructor / init / PENDING_CREATION to fire."""
    snap, topo = _startup_snapshot(False, "ALIVE", DRIVER_IN_TRAIN_LOOP)
    snap = tf.stacks_without(snap, frozenset({401}))
    v = _diag(snap, topo).verdict
    assert v.stage is Stage.ROLLOUT_DISPATCH, v.summary


# --------------------------------------------------------------------------- class 3: broadcast

# Schedulers and engine actors of the weight broadcast, recorded (plain and --native py-spy) from demo
# fault weight_sync_engine_wedged: engine 0's scheduler waits on its broadcast handles (innermost Python
# frame ModelRunner.update_weights_from_distributed, no broadcast frame, as SGLang 0.5.15.post1),
# engine 1's is wedged before the broadcast; both actors wait on their /update_weights_from_distributed.


def _recorded(label: str, native: bool) -> ThreadStack:
    return recorded_main_thread(wedged_bundle(native), WEDGED_PIDS[label])


# Train rank 1 of the healthy demo job caught in its weight update (demo2/none, pid 5863): in
# `ray.get` under `UpdateWeightFromDistributed.update_weights`, as a rank whose NCCL broadcasts were
# posted waits on the engines' update calls (no collective frame of its own).
TRAINER_RAY_GET = rs.main_thread(rs.bundle("demo2/none"), 5863)


@pytest.mark.parametrize("native", [False, True], ids=["plain", "native"])
@pytest.mark.parametrize("wedged", [0, 1])
@pytest.mark.parametrize("trainer_stacks", [True, False])
@pytest.mark.parametrize("engine_node", [NODE, NODE2])
def test_odd_engine_out_of_the_weight_broadcast_is_the_culprit(
    wedged: int, trainer_stacks: bool, engine_node: str, native: bool
) -> None:
    urls = [f"http://{engine_node}:15000", f"http://{engine_node}:15001"]
    in_broadcast = _recorded("engine 0 scheduler", native)
    stuck = _recorded("engine 1 scheduler", native)
    actors = [_recorded(f"engine {i} actor", native) for i in (0, 1)]
    stacks: list[StackObs] = []
    for s in (0, 1):
        for i in (0, 1):
            sched = stuck if i == wedged else in_broadcast
            stacks += [
                stack_obs(400 + i, actors[i], sample=s, node=engine_node),
                stack_obs(410 + i, sched, sample=s, node=engine_node),
            ]
        if trainer_stacks:
            stacks.append(stack_obs(300, TRAINER_RAY_GET, sample=s))
    answers = []
    for url in urls:
        answers += [
            http(
                url,
                "/server_info",
                None,
                error="timed out after 5.0s",
                sample=1,
                outcome=Outcome.TIMED_OUT,
            ),
            http(
                url,
                "/health",
                None,
                error="timed out after 2.0s",
                sample=1,
                outcome=Outcome.TIMED_OUT,
            ),
        ]
    snap = snapshot(stacks=tuple(stacks), http=tuple(answers), jobs=(running_job(),))
    members = [
        member(Role.TRAIN_RANK, 300, cls="MegatronTrainRayActor", method="update_weights", rank=0)
    ]
    for i, url in enumerate(urls):
        for m in (
            member(Role.SGLANG_ENGINE, 400 + i, cls="SGLangEngine", url=url, actor_id=f"e{i}"),
            member(Role.SGLANG_ENGINE, 410 + i, "scheduler", url=url, actor_id=f"e{i}"),
        ):
            stacks_node = m.__class__(**{**m.__dict__, "node_ip": engine_node})
            members.append(stacks_node)
    topo = topology(*members, engines=[Engine(u, engine_node) for u in urls])
    v = _diag(snap, topo).verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.NCCL_BROADCAST, v.summary
    assert [c.engine_url for c in v.culprits] == [urls[wedged]], v.summary
    assert v.culprits[0].node_ip == engine_node
    assert v.culprits[0].pid == 410 + wedged or v.culprits[0].pid == 400 + wedged
    victim = urls[1 - wedged]
    assert not any(
        r.culprit and r.pid in (400 + 1 - wedged, 410 + 1 - wedged) for r in _diag(snap, topo).rows
    ), victim


# --------------------------------------------------------------------------- class 2: dead engine

REFUSED = "connection refused"
RM_FILE = "slime/ray/rollout.py"


# Recorded: demo fault engine_server_killed. Engine 0 (actor 22827, HTTP server 22895 listening on
# 127.0.0.1:38351, scheduler 22900) serves; engine 1's HTTP server killed itself at its first
# /generate, its actor 22826 lives on with no child; the driver (22749) waits in `train`, the
# RolloutManager (22793) in `generate` with its loop idle. Process rows, stacks and the heads of
# actor 22826's worker log are the recording's; HTTP answers, router and Ray actors are built.
KILLED = rs.bundle("demo/engine_server_killed")
KILLED_PIDS = {"driver": 22749, "rm": 22793, "e0": 22827, "e0 server": 22895, "e0 scheduler": 22900}
KILLED_PIDS |= {"e1": 22826}
KILLED_URL0, KILLED_URL1 = "http://127.0.0.1:38351", "http://127.0.0.1:38354"
# another bare engine actor: the row of demo fault rollout_slots_leaked's engine actor 4898, whose
# children are not taken into this world
OTHER_ENGINE_ACTOR = (rs.bundle("demo/rollout_slots_leaked"), 4898)


def _dead_server_world(
    router: bool,
    earlier: bool,
    logged: bool = False,
    second_bare: bool = False,
    probed: bool = True,
) -> tuple[object, Topology]:
    """Engine 1's HTTP server was killed mid-rollout; its SGLangEngine actor (KILLED_PIDS["e1"]) lives on,
    with no server child. Engine 0 is healthy and idle. The RolloutManager's loop waits on I/O
    (its requests to engine 1 fail and are retried). The topology is built by the product from
    the processes and Ray state, as `attach` builds it. `logged`: the head of engine 1's actor's
    worker log (the node-local `actor_log_head` source) names the URL its server listened on.
    `second_bare`: another engine actor of the node has no server child either.
    `probed=False`: nothing told the doctor engine 1's URL, so it never asked it."""
    from slime_hangdoctor.parsers.sglang import RouterWorkers
    from slime_hangdoctor.topology import build_topology

    url0, url1 = KILLED_URL0, KILLED_URL1
    router_url = f"http://{NODE}:30000"
    stacks = rs.stacks(KILLED, KILLED_PIDS["driver"], KILLED_PIDS["rm"])
    answers = [
        http(url0, "/v1/loads", 200, EngineLoad(running=0, waiting=0), sample=s) for s in (0, 1)
    ]
    answers += [
        http(url1, path, None, error=REFUSED, sample=1, outcome=Outcome.UNAVAILABLE)
        for path in ("/model_info", "/server_info")
        if probed
    ]
    if earlier:  # the first sample still got an answer: it died inside the window
        answers.append(http(url1, "/v1/loads", 200, EngineLoad(running=2, waiting=0), sample=0))
    if router:
        answers += [
            http(router_url, "/workers", 200, RouterWorkers((url0, url1)), sample=s, kind="router")
            for s in (0, 1)
        ]
    heads = rs.log_heads(KILLED, KILLED_PIDS["e1"]) if logged else ()
    other = OTHER_ENGINE_ACTOR[1]
    views = tuple(
        dataclasses.replace(
            table,
            fact=(
                *table.fact,
                *((rs.process(OTHER_ENGINE_ACTOR[0], other, s),) if second_bare else ()),
            ),
        )
        for s, table in ((s, rs.processes(KILLED, s)) for s in (0, 1))
    )
    snap = snapshot(
        stacks=stacks,
        http=tuple(answers),
        processes=views,
        jobs=(running_job(KILLED_PIDS["driver"]),),
        actors=(
            actor("rm", "RolloutManager", KILLED_PIDS["rm"]),
            actor("e0", "SGLangEngine", KILLED_PIDS["e0"]),
            actor("e1", "SGLangEngine", KILLED_PIDS["e1"]),
            *((actor("e2", "SGLangEngine", other),) if second_bare else ()),
        ),
        log_heads=heads,
    )
    return snap, build_topology(snap)  # type: ignore[arg-type]


@pytest.mark.parametrize(("router", "earlier"), [(True, False), (False, True), (True, True)])
def test_engine_whose_server_is_gone_is_dead_and_the_culprit(router: bool, earlier: bool) -> None:
    snap, topo = _dead_server_world(router, earlier)
    d = _diag(snap, topo)
    v = d.verdict
    url1 = KILLED_URL1
    assert v.status is Status.HUNG
    assert v.stage is Stage.ROLLOUT_DISPATCH
    assert v.culprits[0].role is Role.SGLANG_ENGINE and v.culprits[0].engine_url == url1, v.summary
    assert v.culprits[0].pid == KILLED_PIDS["e1"]  # the actor whose server is gone
    assert {"url": url1, "state": "dead"} in v.extra["engines"]  # type: ignore[operator]
    assert not any(c.role is Role.ROLLOUT_MANAGER for c in v.culprits)


@pytest.mark.parametrize("second_bare", [False, True])
def test_engine_known_only_from_its_actors_log_is_dead_and_the_culprit(second_bare: bool) -> None:
    """No router and no earlier answer (the demo's shape): the URL comes from the head of the
    engine actor's own worker log, so the actor is paired with it even when another engine actor
    of the node has no server child either (the one-of-each pairing could not choose), and the
    evidence names where the URL was read."""
    snap, topo = _dead_server_world(False, False, logged=True, second_bare=second_bare)
    url1 = KILLED_URL1
    engine = next(e for e in topo.engines if e.url == url1)
    assert (engine.source, engine.actor_pid) == ("actor-log", KILLED_PIDS["e1"])
    v = _diag(snap, topo).verdict
    assert v.status is Status.HUNG and v.stage is Stage.ROLLOUT_DISPATCH, v.summary
    assert v.culprits[0].engine_url == url1 and v.culprits[0].pid == KILLED_PIDS["e1"], v.summary
    assert {"url": url1, "state": "dead"} in v.extra["engines"]  # type: ignore[operator]
    evidence = [e for f in v.findings for e in f.evidence]
    head = f"known from the head of the err log of SGLangEngine pid {KILLED_PIDS['e1']}"
    assert any(head in e for e in evidence), evidence


def test_without_the_log_head_the_dead_engine_is_invisible() -> None:
    """The same world without the log head (nor router, nor earlier answer): no URL to probe,
    no dead engine, and the culprit is not engine 1 (why the head is read)."""
    snap, topo = _dead_server_world(False, False, logged=False, probed=False)
    assert all(e.url != KILLED_URL1 for e in topo.engines)
    v = _diag(snap, topo).verdict
    assert not v.culprits or v.culprits[0].pid != KILLED_PIDS["e1"], v.summary


# --------------------------------------------------------------------------- class 4: lost requests


# Recorded: demo fault rollout_slots_leaked (the RolloutManager's loop idle in `generate` while no
# engine has a request). Engine 0: actor 4899, HTTP server 4929 on 127.0.0.1:40697; engine 1: actor
# 4898, server 4959 on 127.0.0.1:40700; driver 4835 in `train`, RolloutManager 4868. Process rows
# and stacks are the recording's; HTTP answers, router, task history and sockets are built.
LEAKED = rs.bundle("demo/rollout_slots_leaked")
LEAKED_PIDS = {
    "driver": 4835,
    "rm": 4868,
    "e0": 4899,
    "e0 server": 4929,
    "e1": 4898,
    "e1 server": 4959,
}
LEAKED_PIDS |= {"e1 scheduler": 4968}
LEAKED_URL0, LEAKED_URL1 = "http://127.0.0.1:40697", "http://127.0.0.1:40700"
LEAKED_HOST1, LEAKED_PORT1 = "127.0.0.1", 40700


def _idle_loop_world(
    *,
    dead_engine: bool = False,
    router_down: bool = False,
    env: dict[str, str] | None = None,
    paused_engine: bool = False,
    history: bool = False,
    rm_conns: tuple[tuple[str, int], ...] | None = None,
) -> tuple[object, Topology]:
    """The RolloutManager's loop waits on I/O in `generate`; engine 0 answers and holds nothing.
    `dead_engine`: engine 1's server and scheduler have exited before the first sample
    (`transforms.processes_without`) and its URL refuses. `env`: added to
    the RolloutManager's recorded environment (`transforms.process_with_env`). `history`: Ray's
    task history, where the RolloutManager's `generate` has run 60 s after two earlier runs of
    2 s. `rm_conns`: the sockets source read at both samples, with the RolloutManager holding these
    (ip, port) peers open at both."""
    from slime_hangdoctor.parsers.sglang import RouterWorkers
    from slime_hangdoctor.topology import build_topology
    from tests.fixtures import transforms as tf

    url0, url1 = LEAKED_URL0, LEAKED_URL1
    router_url = f"http://{NODE}:30000"
    stacks = rs.stacks(LEAKED, LEAKED_PIDS["driver"], LEAKED_PIDS["rm"])
    answers = [
        http(url, "/v1/loads", 200, EngineLoad(running=0, waiting=0), sample=s)
        for s in (0, 1)
        for url in ((url0,) if dead_engine else (url0, url1))
    ]
    if paused_engine:  # SGLang >= 0.5.20 says it: /ready 503 while /ping 200
        answers += [http(url1, "/ready", 503, sample=s) for s in (0, 1)]
        answers += [http(url1, "/ping", 200, sample=s) for s in (0, 1)]
    if dead_engine:
        answers += [
            http(url1, "/model_info", None, error=REFUSED, sample=s, outcome=Outcome.UNAVAILABLE)
            for s in (0, 1)
        ]
    answers += [
        http(
            router_url,
            "/workers",
            None,
            error=REFUSED,
            kind="router",
            sample=s,
            outcome=Outcome.UNAVAILABLE,
        )
        if router_down
        else http(router_url, "/workers", 200, RouterWorkers((url0, url1)), kind="router", sample=s)
        for s in (0, 1)
    ]
    gone = frozenset({LEAKED_PIDS["e1 server"], LEAKED_PIDS["e1 scheduler"]} if dead_engine else ())
    views = tuple(
        dataclasses.replace(
            table,
            fact=tuple(
                tf.process_with_env(p, env or {}) if p.pid == LEAKED_PIDS["rm"] else p
                for p in table.fact
            ),
        )
        for table in (rs.processes(LEAKED, s, without=gone) for s in (0, 1))
    )
    snap = snapshot(
        stacks=stacks,
        http=tuple(answers),
        processes=views,
        task_pages=_rm_history() if history else (),
        sockets=_rm_sockets(rm_conns) if rm_conns is not None else (),
        jobs=(running_job(LEAKED_PIDS["driver"]),),
        actors=(
            actor("rm", "RolloutManager", LEAKED_PIDS["rm"]),
            actor("e0", "SGLangEngine", LEAKED_PIDS["e0"]),
            actor("e1", "SGLangEngine", LEAKED_PIDS["e1"]),
        ),
    )
    return snap, build_topology(snap)  # type: ignore[arg-type]


def _rm_history(now_s: float = 1000.0) -> tuple[TaskPageObs, ...]:
    """Ray's task pages: the RolloutManager's generate running for 60 s (both samples), two
    earlier generate runs of 2 s each in the job's history (at the last sample)."""
    ms = int(now_s * 1000)

    def gen(i: int, start_s: float, end_s: float | None) -> RayTask:
        return RayTask(
            f"t{i}",
            "RolloutManager.generate",
            "FINISHED" if end_s is not None else "RUNNING",
            actor_id="rm",
            worker_pid=LEAKED_PIDS["rm"],
            job_id="01000000",
            start_time_ms=ms + int(start_s * 1000),
            task_type="ACTOR_TASK",
            end_time_ms=ms + int(end_s * 1000) if end_s is not None else None,
            creation_time_ms=ms + int(start_s * 1000),
        )

    running = gen(3, -60.0, None)
    earlier = (gen(1, -70.0, -68.0), gen(2, -66.0, -64.0))
    return (
        TaskPageObs("tasks_unfinished", 0, now_s - 3.0, (running,)),
        TaskPageObs("tasks_unfinished", 1, now_s, (running,)),
        TaskPageObs("tasks_job_01000000", 1, now_s, (*earlier, running)),
    )


def _rm_sockets(
    peers: tuple[tuple[str, int], ...],
) -> tuple[Observed[tuple[TcpConnection, ...]], ...]:
    conns = tuple(
        TcpConnection(
            LEAKED_PIDS["rm"],
            30 + i,
            TcpSocket(NODE, 40000 + i, ip, port, "ESTABLISHED", 0, 0, 900 + i),
            NODE,
        )
        for i, (ip, port) in enumerate(peers)
    )
    return tuple(Observed("sockets", NODE, s, conns) for s in (0, 1))


def _roles(v: object) -> list[Role]:
    return [c.role for c in v.culprits]  # type: ignore[attr-defined]


def test_idle_loop_and_empty_engines_alone_blame_nobody() -> None:
    """Waiting on I/O while no engine has a request is not a culprit by itself."""
    v = _diag(*_idle_loop_world()).verdict
    assert v.status is Status.HUNG and v.stage is Stage.ROLLOUT_DISPATCH, v.summary
    assert _roles(v) == [], v.summary


def test_the_rollout_manager_is_blamed_on_its_task_history_and_its_connections() -> None:
    """Its generate runs 30x longer than before and it holds no connection to an engine, router
    or proxy: the requests never left it, and the culprit finding says what shows it."""
    v = _diag(*_idle_loop_world(history=True, rm_conns=())).verdict
    assert _roles(v) == [Role.ROLLOUT_MANAGER], v.summary
    assert v.culprits[0].pid == LEAKED_PIDS["rm"]
    culprit = next(f for f in v.findings if f.rule == "culprit")
    assert "ray_tasks" in culprit.message and "rollout" in culprit.message
    assert any(e.startswith("[ray_tasks]") and "generate for 60s" in e for e in culprit.evidence)
    assert any(e.startswith("[sockets]") and "no connection" in e for e in culprit.evidence)


@pytest.mark.parametrize(
    ("history", "rm_conns"),
    [
        (False, ()),  # no task history: a first rollout, or the history was not read
        (True, None),  # no sockets: held connections cannot be excluded
        (True, ((LEAKED_HOST1, LEAKED_PORT1),)),  # it holds a connection to engine 1: not in the RM
    ],
)
def test_without_its_evidence_the_rollout_finder_does_not_blame_the_rollout_manager(
    history: bool, rm_conns: tuple[tuple[str, int], ...] | None
) -> None:
    v = _diag(*_idle_loop_world(history=history, rm_conns=rm_conns)).verdict
    for c in (f for f in v.findings if f.rule == "culprit"):
        assert not any(e.startswith("[rollout]") for e in c.evidence), c
    if rm_conns:  # the engine its requests wait at is the culprit (sockets), not the manager
        assert _roles(v) == [Role.SGLANG_ENGINE], v.summary
        assert v.culprits[0].engine_url == LEAKED_URL1


def test_a_dead_engine_holds_the_requests_not_the_rollout_manager() -> None:
    v = _diag(*_idle_loop_world(dead_engine=True)).verdict
    assert _roles(v) == [Role.SGLANG_ENGINE], v.summary
    assert v.culprits[0].engine_url == LEAKED_URL1


def test_an_unreachable_router_is_its_own_finding() -> None:
    v = _diag(*_idle_loop_world(router_down=True)).verdict
    assert Role.ROLLOUT_MANAGER not in _roles(v), v.summary
    assert _roles(v)[:1] == [Role.ROUTER]


@pytest.mark.parametrize(
    ("env", "in_the_way"),
    [
        ({"http_proxy": "http://proxy.corp:3128"}, True),
        ({"HTTP_PROXY": "http://proxy.corp:3128", "NO_PROXY": "localhost,example.org"}, True),
        ({"all_proxy": "http://proxy.corp:3128", "no_proxy": "10.0.0.0/8"}, True),  # no CIDR
        # Python's rule (hazards.proxy_for_url): https_proxy is for https URLs only
        ({"HTTPS_PROXY": "http://proxy.corp:3128", "NO_PROXY": "example.org"}, False),
        ({"http_proxy": "http://proxy.corp:3128", "no_proxy": f"localhost,{LEAKED_HOST1}"}, False),
        ({"http_proxy": "http://proxy.corp:3128", "no_proxy": "*"}, False),
        ({"http_proxy": "http://proxy.corp:3128", "no_proxy": ".0.0.1"}, False),  # a suffix
    ],
)
def test_a_proxy_in_the_rollout_managers_environment_is_its_own_cause(
    env: dict[str, str], in_the_way: bool
) -> None:
    v = _diag(*_idle_loop_world(env=env)).verdict
    cause = next((f for f in v.findings if f.rule == "requests-at-proxy"), None)
    if in_the_way:
        assert _roles(v) == [Role.ROLLOUT_MANAGER], v.summary
        culprit = next(f for f in v.findings if f.rule == "culprit")
        assert "environ" in culprit.message and "proxy.corp:3128" in v.culprits[0].why
        assert cause is not None and "proxy.corp:3128" in cause.message
        assert any(e.startswith("[environ]") for e in cause.evidence), cause
        assert any("--noproxy" in s for s in v.step_texts), v.next_steps
    else:
        assert cause is None and _roles(v) == [], v.summary


def test_a_paused_engine_holds_the_requests_and_is_the_culprit() -> None:
    v = _diag(*_idle_loop_world(paused_engine=True)).verdict
    assert {"url": LEAKED_URL1, "state": "paused"} in v.extra["engines"]  # type: ignore[operator]
    assert _roles(v) == [Role.SGLANG_ENGINE], v.summary
    assert v.culprits[0].engine_url == LEAKED_URL1
    assert "paused" in v.culprits[0].why
    assert v.stage is Stage.ROLLOUT_DISPATCH

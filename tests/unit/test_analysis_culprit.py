"""Culprit search: real RAS after a peer was killed, cascades across communicators / process groups
(the rank behind everywhere is the root, not the victims that show up behind elsewhere), routers,
engines, the odd scheduler out and processes that died.

Stacks are recorded (tests/unit/recorded_stacks.py: demo bundles and stage-shapes, plain and
`--native`). One part no CPU process can show: sglang#17870's odd scheduler is blocked in
`cuStreamSynchronize` under `rebuild_cuda_tensor` (CUDA IPC); the recorded odd rank parks in a
real wait at the same place of the update instead, so the CUDA frames themselves are untested here.
The flight-recorder cascade is recorded from three real Gloo ranks in two process groups, and so is
a group whose pg_id differs across its ranks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.analysis.parts import engines, flight_recorder, ras
from slime_hangdoctor.analysis.source_analysis import MEDIUM, STRONG, WEAK, Reads, assess
from slime_hangdoctor.analysis.world import World, build_world
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.flight_recorder import FrDump, parse_flight_recorder
from slime_hangdoctor.parsers.nccl_ras import parse_ras
from slime_hangdoctor.parsers.processes import ProcessInfo, parse_processes
from slime_hangdoctor.parsers.sglang import HTTP_ANSWERS
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.source_spec import Observed
from slime_hangdoctor.topology import Engine
from slime_hangdoctor.verdict import Role, Stage, Status, Verdict
from tests.fixtures import transforms as tf
from tests.unit import recorded_shapes as rs
from tests.unit.analysis_builders import (
    NODE,
    http,
    member,
    procs_obs,
    running_job,
    snapshot,
    topology,
)
from tests.unit.demo_bundles import WEDGED_PIDS, recorded_main_thread, wedged_bundle
from tests.unit.recorded_stacks import (
    as_obs,
    demo,
    gloo_rank,
    recorded_process,
    recorded_thread,
    tp_scheduler,
)

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "gpu-2xh200-nccl-broadcast-hang"
URL = f"http://{NODE}:15000"


def _reads(world: World) -> Reads:
    """What the suspect finders read, built as `diagnose` builds it."""
    return Reads(world, assess(world))


FR_CASCADE = REAL.parent / "local-cpu-gloo-fr-cascade"


def _ranks(*pids: int) -> tuple:  # type: ignore[type-arg]
    """Train ranks 0.. at `pids`, both samples: the recorded process rows of the FR cascade's Gloo
    ranks (real/local-cpu-gloo-fr-cascade: `python3 fr_cascade.py R`, RANK=R in the environment),
    moved to `pids` by `transforms.process_relabelled`."""
    rows = sorted(
        parse_processes((FR_CASCADE / "processes.json").read_text()), key=lambda p: p.env["RANK"]
    )
    moved = [
        tf.process_relabelled(row, pid=pid, ppid=1, node_ip=NODE)
        for row, pid in zip(rows, pids, strict=False)
    ]
    return tuple(procs_obs(s, *moved) for s in (0, 1))


def test_real_ras_after_the_peer_was_killed_names_the_dead_rank() -> None:
    report = parse_ras((REAL / "run2_ras_hang_peerkilled_80s.json").read_text())
    snap = snapshot(
        ras=(Observed("nccl_ras", "192.0.2.2", 0, report),),
        processes=_ranks(674, 675),
        ray_seen=False,
    )
    v = diagnose(snap, topology()).verdict
    assert v.status is Status.HUNG
    assert [(c.pid, c.rank, c.gpu) for c in v.culprits] == [(675, 1, 1)]
    assert "missing" in v.culprits[0].why and "considered dead" in v.culprits[0].why


def test_ras_cascade_blames_the_rank_behind_everywhere() -> None:
    """C (pid 11) never enters TP's Broadcast; V (pid 10) waits in it, so in the DP group V falls
    behind its peer W (pid 12). V is behind in DP but it is a victim: it launched an op C has not.
    Each communicator is a real RAS reading (2x H200): TP is run3_hang's (rank 0, 571 -> V, launched
    Broadcast 1; rank 1, 572 -> C, none), DP is run3_train_stuck's (rank 0, 708 -> W, AllReduce 2;
    rank 1, 709 -> V, AllReduce 1), joined into one report by `transforms.ras_communicators_joined`."""
    tp = parse_ras((REAL / "run3_hang.ras.json").read_text())
    dp = parse_ras((REAL / "run3_train_stuck.ras.json").read_text())
    report = tf.ras_communicators_joined((tp, dp), {571: 10, 572: 11, 708: 12, 709: 10}, NODE)
    assert [c.errors for c in report.communicators] == ["MISMATCH", "MISMATCH"]
    snap = snapshot(
        samples=1,
        ras=(Observed("nccl_ras", NODE, 0, report),),
        processes=_ranks(10, 11, 12)[:1],
    )
    world = build_world(snap, topology())
    assert [s.pid for s in ras.suspects(_reads(world))] == [11]


@dataclass(frozen=True)
class RecordedFr:
    """A recorded flight-recorder capture (dumps of ranks 0-2, the real process scan of them, the
    ranks' pids) and the one-sample snapshot of both."""

    pids: dict[int, int]
    dumps: tuple[FrDump, ...]
    rows: tuple[ProcessInfo, ...]
    snap: Snapshot


def _recorded_fr(folder: Path, prefix: str) -> RecordedFr:
    pids = {int(r): pid for r, pid in json.loads((folder / "pids.json").read_text()).items()}
    dumps = tuple(
        parse_flight_recorder((folder / f"{prefix}_rank_{r}.pkl").read_bytes(), rank=r)
        for r in (0, 1, 2)
    )
    rows = tuple(parse_processes((folder / "processes.json").read_text()))
    snap = snapshot(
        samples=1,
        flight=tuple(Observed("flight_recorder", NODE, 0, d) for d in dumps),
        processes=(procs_obs(0, *rows),),
    )
    return RecordedFr(pids, dumps, rows, snap)


def test_flight_recorder_cascade_blames_the_root() -> None:
    """Recorded (real/local-cpu-gloo-fr-cascade: torch 2.13's flight recorder of three real Gloo
    ranks, groups A = {0, 1} and B = {0, 2}, and the real process scan of them): rank 1 never enters
    A's #5, rank 0 waits in it; rank 2 waits in B's #3, which rank 0 (stuck in A) never entered.
    Rank 1 is the root; rank 0 is behind in B but a victim. The dumps' pg_id is each process's own
    count (rank 2's B is pg 1, as rank 0's A): the groups are matched by their names ('1', '2')."""
    fr = _recorded_fr(FR_CASCADE, "fr_cascade")
    pids, dumps, rows, snap = fr.pids, fr.dumps, fr.rows, fr.snap
    assert {e.state for d in dumps for e in d.entries} == {"scheduled"}  # Gloo: pg_status only
    assert [d.pg_status["1"]["last_enqueued_collective"] for d in dumps] == [5, 4, 3]
    assert {p.pid: p.env["RANK"] for p in rows} == {pid: str(r) for r, pid in pids.items()}
    world = build_world(snap, topology())
    assert [(g.pg, [c.rank for c in g.cursors]) for g in flight_recorder.fr_groups(world)] == [
        ("1", [0, 1]),
        ("2", [0, 2]),
    ]
    suspects = flight_recorder.suspects(_reads(world))
    assert [(s.rank, s.pid) for s in suspects] == [(1, pids[1])]
    assert suspects[0].stage is Stage.TRAIN  # all_reduce <- train_one_step, as recorded
    v = diagnose(snap, topology()).verdict
    assert v.stage is Stage.TRAIN
    assert [c.rank for c in v.culprits] == [1]


FR_GROUPS = REAL.parent / "local-cpu-gloo-fr-groups"


def test_flight_recorder_matches_a_group_by_name_not_by_pg_id() -> None:
    """Recorded (real/local-cpu-gloo-fr-groups: torch 2.13's flight recorder of three real Gloo
    ranks, and the real process scan of them). As Megatron does, every rank called new_group for
    EMBEDDING_GROUP = {0, 1} and DATA_PARALLEL_GROUP = {0, 1, 2}; rank 2, no member of the first,
    created one group fewer, so DATA_PARALLEL_GROUP is pg_id 2 on ranks 0 and 1 and pg_id 1 on
    rank 2 (where pg_id 1 is EMBEDDING_GROUP on the others). Rank 2 never enters its #4, ranks 0
    and 1 wait in it. Matched by pg_id, rank 2's cursor met EMBEDDING_GROUP's and the group read
    'every rank entered #4 and none completed it', with no culprit."""
    fr = _recorded_fr(FR_GROUPS, "fr_groups")
    pids, dumps, rows, snap = fr.pids, fr.dumps, fr.rows, fr.snap
    assert [{(e.pg_id, e.pg_name, e.pg_desc) for e in d.entries} for d in dumps] == [
        {(1, "1", "EMBEDDING_GROUP"), (2, "2", "DATA_PARALLEL_GROUP")},
        {(1, "1", "EMBEDDING_GROUP"), (2, "2", "DATA_PARALLEL_GROUP")},
        {(1, "2", "DATA_PARALLEL_GROUP")},
    ]
    assert {p.pid: p.env["RANK"] for p in rows} == {pid: str(r) for r, pid in pids.items()}
    world = build_world(snap, topology())
    groups = {g.pg: g for g in flight_recorder.fr_groups(world)}
    assert sorted(groups) == ["1", "2"]
    dp = groups["2"]
    assert (dp.desc, dp.label) == ("DATA_PARALLEL_GROUP", "2 (DATA_PARALLEL_GROUP)")
    assert [(c.rank, c.enqueued, c.completed) for c in dp.cursors] == [
        (0, 4, 3),
        (1, 4, 3),
        (2, 3, 3),
    ]
    assert [c.rank for c in dp.behind] == [2] and [c.rank for c in dp.waiting] == [0, 1]
    assert dp.stuck is not None and dp.stuck.collective_seq_id == 4
    assert [c.rank for c in groups["1"].cursors] == [0, 1] and not groups["1"].behind
    reads = _reads(world)
    suspects = flight_recorder.suspects(reads)
    assert [(s.rank, s.pid) for s in suspects] == [(2, pids[2])]
    assert "process group 2 (DATA_PARALLEL_GROUP)" in suspects[0].why
    assert [e.rule for e in flight_recorder.evidence(reads, suspects)] == [
        "fr-collective-not-joined"
    ]
    v = diagnose(snap, topology()).verdict
    assert v.stage is Stage.TRAIN  # all_reduce <- train_one_step, as recorded
    assert [(c.rank, c.pid) for c in v.culprits] == [(2, pids[2])]
    # a dump of an older torch names no group: the groups are keyed by pg_id, as before
    unnamed = tuple(
        parse_flight_recorder(
            tf.fr_drop_entry_field(
                (FR_GROUPS / f"fr_groups_rank_{r}.pkl").read_bytes(), "process_group"
            ),
            rank=r,
        )
        for r in (0, 1, 2)
    )
    old = build_world(
        snapshot(samples=1, flight=tuple(Observed("flight_recorder", NODE, 0, d) for d in unnamed)),
        topology(),
    )
    assert [(g.pg, g.desc) for g in flight_recorder.fr_groups(old)] == [("1", None), ("2", None)]


def test_router_that_refuses_connections_is_the_culprit() -> None:
    # the demo's RolloutManager in `generate` (pid 24105): main thread in Future.result, its
    # asyncio loop thread idle, at both samples
    rm = demo("engine_paused_by_update")
    snap = snapshot(
        stacks=tuple(as_obs(200, s, *recorded_process(rm, 24105, s).threads) for s in (0, 1)),
        http=tuple(
            http(
                "http://10.0.0.1:3001",
                "/workers",
                None,
                sample=s,
                error="connection refused",
                outcome=Outcome.UNAVAILABLE,
                kind="router",
            )
            for s in (0, 1)
        ),
        jobs=(running_job(),),
    )
    v = diagnose(
        snap, topology(member(Role.ROLLOUT_MANAGER, 200, cls="RolloutManager", method="generate"))
    ).verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.ROLLOUT_DISPATCH
    assert v.culprits[0].role is Role.ROUTER


@pytest.mark.parametrize("native", [False, True], ids=["plain", "native"])
def test_unresponsive_engine_whose_scheduler_waits_in_the_broadcast_is_only_weakly_blamed(
    native: bool,
) -> None:
    """Trainer rank 0 and the engine's scheduler both wait inside the weight broadcast: the engine
    not answering /health is explained (it is a victim too), so it is not blamed strongly. Recorded
    from demo fault weight_sync_engine_wedged: rank 0 in dist.broadcast, engine 0's scheduler in
    handle.wait() of its async broadcasts (no broadcast frame: SGLang 0.5.15.post1)."""
    trainer = recorded_main_thread(wedged_bundle(native), WEDGED_PIDS["train rank 0"])
    sched = recorded_main_thread(wedged_bundle(native), WEDGED_PIDS["engine 0 scheduler"])
    snap = snapshot(
        samples=1,
        stacks=(as_obs(411, 0, sched), as_obs(300, 0, trainer)),
        http=(http(URL, "/health", 503),),
    )
    topo = topology(
        member(Role.TRAIN_RANK, 300, cls="MegatronTrainRayActor", method="update_weights", rank=0),
        member(Role.SGLANG_ENGINE, 411, "scheduler", url=URL),
        engines=[Engine(URL, NODE)],
    )
    world = build_world(snap, topo)
    (s,) = engines.suspects(_reads(world))
    assert s.weight == WEAK and s.waits_elsewhere
    assert "same collective as the trainers" in s.why
    alone = build_world(
        snapshot(samples=1, stacks=(as_obs(411, 0, sched),), http=snap.joined(HTTP_ANSWERS)), topo
    )
    (s,) = engines.suspects(_reads(alone))
    assert s.weight == MEDIUM  # no trainer waits with it: the engine itself is stuck


@pytest.mark.parametrize("native", [False, True], ids=["plain", "native"])
def test_odd_scheduler_out_in_a_colocated_tensor_update(native: bool) -> None:
    """sglang#17870 shape: three TP schedulers wait in the tp_cpu_group barrier, one has not left
    the tensor update. The odd one is the suspect; the known cause is linked. Recorded: stage-shapes'
    four Gloo TP ranks (the odd one parked where the GPU case blocks in CUDA IPC) and the demo's
    train rank waiting on the colocated engine (colocate_update_hang, pid 7665)."""
    trainer = recorded_thread(demo("colocate_update_hang"), 7665)
    stacks = [as_obs(500 + i, s, tp_scheduler(i, native)) for i in range(4) for s in (0, 1)]
    stacks += [as_obs(300, s, trainer) for s in (0, 1)]
    topo = topology(
        member(Role.TRAIN_RANK, 300, cls="MegatronTrainRayActor", method="update_weights", rank=0),
        *(member(Role.SGLANG_ENGINE, 500 + i, "scheduler", url=URL) for i in range(4)),
        engines=[Engine(URL, NODE)],
    )
    v = diagnose(snapshot(stacks=tuple(stacks), jobs=(running_job(),)), topo).verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.WEIGHT_SYNC
    assert [c.pid for c in v.culprits] == [503]
    # no draft model shown: similar to sglang#17870, not asserted (test_analysis_known_causes.py)
    assert "similar-cuda-ipc-colocate-hang" in {f.rule for f in v.findings}


def test_a_train_rank_that_died_during_the_window() -> None:
    # the demo's train ranks in their step (train_rank_stuck, pids 5981 and 6037): rank 0's thread
    # in the step's all_reduce and both ranks' process rows, moved to pids 300 and 301; at the
    # second sample the table is read as after 301 exited (`transforms.processes_without`)
    stuck = demo("train_rank_stuck")
    step = recorded_thread(stuck, 5981)
    rows = {
        pid: rs.process(stuck, rec, as_pid=pid, ppid=1) for pid, rec in ((300, 5981), (301, 6037))
    }
    assert {r.title for r in rows.values()} == {"ray::MegatronTrainRayActor.train"}
    snap = snapshot(
        stacks=(as_obs(300, 0, step), as_obs(300, 1, step)),
        processes=(
            procs_obs(0, rows[300], rows[301]),
            tf.processes_without(procs_obs(1, rows[300], rows[301]), frozenset({301})),
        ),
        jobs=(running_job(),),
    )
    topo = topology(
        member(Role.TRAIN_RANK, 300, cls="MegatronTrainRayActor", method="train", rank=0),
        member(Role.TRAIN_RANK, 301, cls="MegatronTrainRayActor", method="train", rank=1),
    )
    v = diagnose(snap, topo).verdict
    assert v.status is Status.HUNG
    assert v.stage is Stage.TRAIN
    assert [(c.pid, c.rank) for c in v.culprits] == [(301, 1)]
    assert "gone" in v.culprits[0].why


def test_ras_text_form_alone_names_the_rank_that_never_launched() -> None:
    """The RAS answer without its JSON part (NCCL < 2.28): the text warnings carry the counts."""
    text = tf.ras_drop_part((REAL / "run3_hang.ras.json").read_text(), "json")
    snap = snapshot(
        samples=1, ras=(Observed("nccl_ras", "192.0.2.2", 0, parse_ras(text)),), ray_seen=False
    )
    v = diagnose(snap, topology()).verdict
    assert v.status is Status.HUNG
    assert [(c.pid, c.rank, c.gpu) for c in v.culprits] == [(572, 1, 1)]
    assert any("no Python stacks" in b for b in v.blind_spots)


def test_launch_skew_in_a_busy_job_is_not_a_mismatch() -> None:
    """The busy capture: JSON counts 21984 vs 21985 (launch skew) while NCCL's text says OK."""
    busy = (REAL.parent / "gpu-2xh200-ray-nccl-hang" / "busy" / "ras.json").read_text()
    full = snapshot(samples=1, ras=(Observed("nccl_ras", NODE, 0, parse_ras(busy)),))
    assert ras.suspects(_reads(build_world(full, topology()))) == []
    json_only = parse_ras(tf.ras_drop_part(busy, "text"))
    world = build_world(
        snapshot(samples=1, ras=(Observed("nccl_ras", NODE, 0, json_only),)), topology()
    )
    assert [s.weight for s in ras.suspects(_reads(world))] == [WEAK]
    frozen = snapshot(
        ras=(Observed("nccl_ras", NODE, 0, json_only), Observed("nccl_ras", NODE, 1, json_only))
    )
    assert [s.weight for s in ras.suspects(_reads(build_world(frozen, topology())))] == [STRONG]


def _train_world(world: str, native: bool) -> Verdict:
    """Three train ranks whose stacks are stage-shapes' Gloo world `world`, at two samples."""
    stacks = tuple(
        as_obs(300 + r, s, gloo_rank(world, r, native)) for r in range(3) for s in (0, 1)
    )
    topo = topology(
        *(
            member(Role.TRAIN_RANK, 300 + r, cls="MegatronTrainRayActor", method="train", rank=r)
            for r in range(3)
        )
    )
    return diagnose(snapshot(stacks=stacks, jobs=(running_job(),)), topo).verdict


@pytest.mark.parametrize("native", [False, True], ids=["plain", "native"])
@pytest.mark.parametrize(
    ("world", "op"),
    [
        # slime PR#393: two ranks in distributed_masked_whiten's all_reduce, a PP stage in its recv
        ("whiten", "recv_forward"),
        # two ranks in the whitening all_reduce, the third in gather_log_data's gather_object on
        # slime's gloo group: with --native all three wait in c10d::Work::wait (the op is the one
        # the job called: gather_object, not the all_gather inside it)
        ("mixed", "gather_object"),
    ],
)
def test_ranks_in_different_collectives_name_no_rank_without_the_flight_recorder(
    world: str, op: str, native: bool
) -> None:
    """Issue 34 item 5: the stacks show that the ranks are in different collectives, never which
    rank took the wrong path (in PR#393 the two ranks in the whitening all_reduce are the wrong
    ones: it ran on the wrong group); the minority is not named, and the verdict says how to see
    it: arm the flight recorder."""
    v = _train_world(world, native)
    assert (v.status, v.stage) == (Status.HUNG, Stage.TRAIN)
    assert v.culprits == ()
    finding = next(f for f in v.findings if f.rule == "collective-mismatch")
    assert "weak: arm the flight recorder" in finding.message
    assert op in finding.evidence[0] and "all_reduce" in finding.evidence[0]
    # issue 45 item 3: the mismatch is the headline, each side with the line that issued its
    # collective (the whitening all_reduce in distributed_utils.py), nobody blamed
    assert (
        "the train ranks wait in different collectives: train ranks 0, 1 in all_reduce at "
        "slime/utils/distributed_utils.py:" in v.summary
    ), v.summary
    assert "nothing tells which side took the wrong path" in v.summary


@pytest.mark.parametrize("native", [False, True], ids=["plain", "native"])
def test_ranks_in_the_cp_all_gather_of_the_loss(native: bool) -> None:
    """slime PR #2123's shape: two ranks in the loss's context-parallel all-gather (torch's real
    differentiable all_reduce under `_allgather_cp_redistribute`), the third still in its forward
    step: the third is the culprit, and the known case is named."""
    v = _train_world("cp", native)
    assert (v.status, v.stage) == (Status.HUNG, Stage.TRAIN)
    assert [(c.pid, c.rank) for c in v.culprits] == [(302, 2)]
    assert "not in the collective its peers wait in" in v.culprits[0].why
    # neither the CP size nor slime's version is shown: similar to slime PR#2123, not asserted
    assert "similar-cp-allgather-stuck" in {f.rule for f in v.findings}

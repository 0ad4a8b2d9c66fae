"""Blame follows who can still act (issue 34 items 4-7), on recordings of real processes
(provenance in tests/fixtures/README.md):

- demo `train_rank_extra_step` (item 4): train rank 1 runs one more train step than its peer and
  waits in its all_reduce; rank 0 finished `train` (Ray task FINISHED) and its worker idles. Rank 0
  will never come: rank 1, on the path rank 0 did not take, is the culprit, not the idle peer.
- demo `reward_verifier_pool_stuck` (item 6): a custom reward grades in a process pool; its worker,
  a child the RolloutManager forked, spins in sympy for ever while the rollout awaits the grade.
- real/local-cpu-gloo-fr-mismatch (item 5, slime PR#862's shape): two real Gloo ranks posted their
  collectives in different orders on two groups (broadcasts on slime's gloo group, the step's
  all_reduce on the default group), each waits for the other; rank 0 waits in a handle's native
  wait, with no collective frame.
- demo `update_waits_behind_rollout_gate` (item 7): a mutual wait with no HTTP in it, read from
  Ray's task list.
- real/blame-shapes: miles#574 (every rank in the HF conversion's all_gather) and sglang#17941 (a
  later pipeline stage in its request intake).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slime_hangdoctor.analysis.blame import assign
from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.analysis.merge import merge
from slime_hangdoctor.analysis.parts import ras
from slime_hangdoctor.analysis.readers.nvml import NVML
from slime_hangdoctor.analysis.source_analysis import MEDIUM, Reads, assess, suspect
from slime_hangdoctor.analysis.world import build_world
from slime_hangdoctor.parsers.flight_recorder import parse_flight_recorder
from slime_hangdoctor.parsers.nccl_ras import parse_ras
from slime_hangdoctor.parsers.processes import parse_processes
from slime_hangdoctor.parsers.pyspy import ThreadStack, parse_pyspy_json
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.source_spec import Observed
from slime_hangdoctor.verdict import Role, Stage, Status, Verdict
from tests.fixtures import transforms as tf
from tests.unit.analysis_builders import member, procs_obs, running_job, snapshot, topology
from tests.unit.demo_bundles import unpacked
from tests.unit.recorded_stacks import as_obs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DEMO = FIXTURES / "analysis" / "demo"
FR_MISMATCH = FIXTURES / "real" / "local-cpu-gloo-fr-mismatch"


def _rank_pids(bundle: Path) -> dict[int, int]:
    a = analyse_bundle(bundle)
    return {
        m.rank: m.pid
        for m in a.topology.members
        if m.role is Role.TRAIN_RANK and m.rank is not None and m.kind == "actor"
    }


# --------------------------------------------------------------------------- item 4


def test_the_rank_waiting_in_a_collective_its_returned_peer_left_is_the_culprit() -> None:
    bundle = DEMO / "train_rank_extra_step.tar.gz"
    a = analyse_bundle(bundle)
    pids = _rank_pids(bundle)
    v = a.diagnosis.verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.TRAIN), v.summary
    assert [(c.role, c.rank, c.pid) for c in v.culprits] == [(Role.TRAIN_RANK, 1, pids[1])]
    why = v.culprits[0].why
    assert "waits in all_reduce" in why and "its peers will never enter" in why
    assert "train rank 0 returned: its Ray task train FINISHED" in why
    assert "on a path its peers did not take" in why
    world = build_world(a.snapshot, a.topology)
    rank0 = world.find(pids[0])
    assert rank0 is not None and world.returned(rank0) is not None
    rank1 = world.find(pids[1])
    assert rank1 is not None and world.returned(rank1) is None  # it runs train


def test_without_the_returned_ranks_stack_it_is_not_called_returned(tmp_path: Path) -> None:
    """Only its stack (an idle Ray worker) shows that a rank has returned: without it, nothing
    blames rank 1 for a peer that might still come, and nothing blames the unseen rank 0."""
    pids = _rank_pids(DEMO / "train_rank_extra_step.tar.gz")
    src = unpacked("train_rank_extra_step", tmp_path / "src")
    cut = tf.bundle_without_targets(src, tmp_path / "cut", "pyspy", (f"pid{pids[0]}",))
    a = analyse_bundle(cut)
    world = build_world(a.snapshot, a.topology)
    rank0 = world.find(pids[0])
    assert rank0 is not None and rank0.latest is None and world.returned(rank0) is None
    v = a.diagnosis.verdict
    assert all(c.rank != 0 for c in v.culprits), v.culprits
    assert not any("returned" in c.why for c in v.culprits)


# --------------------------------------------------------------------------- item 6


def test_a_reward_pool_worker_that_never_returns_names_the_rollout_manager() -> None:
    a = analyse_bundle(DEMO / "reward_verifier_pool_stuck.tar.gz")
    v = a.diagnosis.verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.REWARD), v.summary
    rm = next(m for m in a.topology.members if m.role is Role.ROLLOUT_MANAGER and m.kind == "actor")
    children = [m for m in a.topology.members if m.kind == "child" and m.parent_pid == rm.pid]
    assert len(children) == 1, a.topology.members  # the pool's one worker; the router is a router
    (culprit,) = v.culprits
    assert (culprit.role, culprit.pid) == (Role.ROLLOUT_MANAGER, rm.pid)
    assert f"rollout manager child (pid {children[0].pid}), a process it forked" in culprit.why
    assert "runs the reward function" in culprit.why
    assert "known-sympy-reward-hang" in {f.rule for f in v.findings}
    assert v.suspected  # CPU-hot reward code: slow and stuck look alike (exit 1)


def test_without_the_pool_workers_stack_nothing_names_it(tmp_path: Path) -> None:
    """The collector before issue 34 read no stack of a RolloutManager's forked pool worker (not
    a member of the topology): the same hang then names no culprit."""
    a = analyse_bundle(DEMO / "reward_verifier_pool_stuck.tar.gz")
    rm = next(m for m in a.topology.members if m.role is Role.ROLLOUT_MANAGER and m.kind == "actor")
    (child,) = [m for m in a.topology.members if m.kind == "child" and m.parent_pid == rm.pid]
    src = unpacked("reward_verifier_pool_stuck", tmp_path / "src")
    cut = tf.bundle_without_targets(src, tmp_path / "cut", "pyspy", (f"pid{child.pid}",))
    v = analyse_bundle(cut).diagnosis.verdict
    assert v.culprits == ()


# --------------------------------------------------------------------------- item 5


def _fr_mismatch(mode: str) -> Verdict:
    """The recorded PR#862 world: both ranks' stacks at two samples (plain or `--native`), with
    or without their flight-recorder dumps."""
    pids = {int(r): p for r, p in json.loads((FR_MISMATCH / "pids.json").read_text()).items()}
    rows = tuple(parse_processes((FR_MISMATCH / "processes.json").read_text()))
    suffix = ".native" if mode == "native" else ""
    stacks = tuple(
        as_obs(
            pids[r],
            s,
            *parse_pyspy_json((FR_MISMATCH / f"rank{r}{suffix}.json").read_text()).threads,
        )
        for r in (0, 1)
        for s in (0, 1)
    )
    flight = (
        tuple(
            Observed(
                "flight_recorder",
                "10.0.0.1",
                0,
                parse_flight_recorder(
                    (FR_MISMATCH / f"fr_mismatch_rank_{r}.pkl").read_bytes(), rank=r, pid=pids[r]
                ),
            )
            for r in (0, 1)
        )
        if mode == "fr"
        else ()
    )
    topo = topology(
        *(
            member(Role.TRAIN_RANK, pids[r], cls="MegatronTrainRayActor", method="train", rank=r)
            for r in (0, 1)
        )
    )
    snap = snapshot(
        stacks=stacks,
        flight=flight,
        processes=(procs_obs(0, *rows), procs_obs(1, *rows)),
        jobs=(running_job(),),
    )
    return diagnose(snap, topo).verdict


def test_the_flight_recorder_names_both_ranks_of_collectives_posted_in_different_orders() -> None:
    v = _fr_mismatch("fr")
    assert (v.status, v.stage) == (Status.HUNG, Stage.TRAIN), v.summary
    assert sorted(c.rank for c in v.culprits) == [0, 1]
    by_rank = {c.rank: c.why for c in v.culprits}
    assert "rank 0 never entered collective #4 gloo:all_reduce" in by_rank[0]
    assert "rank 1 never entered collective #2 gloo:broadcast" in by_rank[1]
    assert "called from sync_actor_critic_data" in by_rank[1]
    assert all("posted their collectives in different orders" in w for w in by_rank.values())


@pytest.mark.parametrize("mode", ["plain", "native"])
def test_without_the_flight_recorder_no_rank_is_named_as_if_it_were_known(mode: str) -> None:
    """No flight recorder: with `--native` both ranks wait in collectives (rank 0's handle wait is
    `c10d::Work::wait`), in different ones, and none is named; with plain stacks rank 0 sits in
    native code under `sync_actor_critic_data` (maybe a collective's own wait): named only weakly.
    Either way the verdict says so and how to see it: arm the flight recorder."""
    v = _fr_mismatch(mode)
    assert (v.status, v.stage) == (Status.HUNG, Stage.TRAIN), v.summary
    finding = next(f for f in v.findings if f.rule == "collective-mismatch")
    assert "weak: arm the flight recorder" in finding.message
    assert "TORCH_FR_BUFFER_SIZE" in finding.evidence[0]
    assert "sync_actor_critic_data" in finding.evidence[0] and "all_reduce" in finding.evidence[0]
    if mode == "native":
        assert v.culprits == ()
    else:
        assert [c.rank for c in v.culprits] == [0]
        assert "weak" in v.culprits[0].why and v.confidence != "high"


GPU_REAL = FIXTURES / "real" / "gpu-2xh200-nccl-broadcast-hang"
TRAIN_STUCK = FIXTURES / "bundles" / "gpu-2xh200-nccl-train-stuck"


def test_ranks_behind_in_different_ops_are_a_mismatch_not_a_straggler() -> None:
    """The real RAS answer of the broadcast hang (rank 1 behind on Broadcast, 1 vs 0) with rank 1
    also having launched an AllReduce rank 0 did not (`transforms.ras_json_count`): each rank is
    behind in one op, so RAS names no straggler and says the ranks launched different ones."""
    real = (GPU_REAL / "run3_hang.ras.json").read_text()
    counts = tf.ras_json_count(tf.ras_drop_part(real, "text"), rank=1, op="AllReduce", n=2)
    for text, behind in ((tf.ras_drop_part(real, "text"), [1]), (counts, [])):
        fact = parse_ras(text)
        snap = snapshot(
            ras=(
                Observed("nccl_ras", "192.0.2.2", 0, fact),
                Observed("nccl_ras", "192.0.2.2", 1, fact),
            )
        )
        world = build_world(snap, topology())
        reads = Reads(world, assess(world))
        assert [s.rank for s in ras.suspects(reads)] == behind
        mismatch = [e for e in ras.evidence(reads, []) if e.rule == "ras-collective-mismatch"]
        assert bool(mismatch) == (not behind)
    assert ras.ras_mismatch(parse_ras(counts).communicators[0]) == (
        "AllReduce: rank(s) 0 behind (2 launched by their peers); "
        "Broadcast: rank(s) 1 behind (1 launched by their peers)"
    )


def test_a_rank_whose_gpu_busy_waits_in_a_collective_is_in_it_whatever_its_frame(
    tmp_path: Path,
) -> None:
    """On NCCL a rank's CPU leaves the collective's frame at once. The real train-stuck bundle
    without RAS and the flight recorder: rank 1 runs Python (process_rollout_data) with its GPU
    idle, rank 0 waits at a CUDA sync in train_one_step: rank 1 is the one outside. With GPU 1
    reading as GPU 0 does (`transforms.bundle_with_nvml_gpu_like`: a collective kernel spinning on
    it too), rank 1 is inside a collective as well: no rank is named from the stacks or NVML, and
    the verdict says to arm the flight recorder."""
    bare = tf.bundle_without_sources(
        TRAIN_STUCK, tmp_path / "bare", frozenset({"nccl_ras", "flight_recorder"})
    )
    v = analyse_bundle(bare).diagnosis.verdict
    assert [c.rank for c in v.culprits] == [1]
    spun = tf.bundle_with_nvml_gpu_like(bare, tmp_path / "spun", gpu=1, like=0)
    v = analyse_bundle(spun).diagnosis.verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.TRAIN), v.summary
    assert v.culprits == ()
    finding = next(f for f in v.findings if f.rule == "collective-mismatch")
    assert "weak: arm the flight recorder" in finding.message


# --------------------------------------------------------------------------- the newer cases

SHAPES = FIXTURES / "real" / "blame-shapes"
ENGINE_URL = "http://10.0.0.1:15000"


def _shape(world: str, rank: int, native: bool = False) -> tuple[int, list[ThreadStack]]:
    pids = json.loads((SHAPES / "pids.json").read_text())
    suffix = ".native" if native else ""
    stack = parse_pyspy_json((SHAPES / f"{world}_rank{rank}{suffix}.json").read_text())
    return pids[f"{world} rank {rank}"], list(stack.threads)


@pytest.mark.parametrize("native", [False, True], ids=["plain", "native"])
def test_every_rank_in_the_hf_conversion_gather_names_no_rank(native: bool) -> None:
    """radixark/miles#574: every MegatronTrainRayActor rank the doctor sees waits in the same
    `all_gather` of `gather_from_tp_ranks`, in the bridge's HF conversion inside update_weights
    (two real Gloo ranks; the third never joins). No rank stands out: the weight sync hangs,
    nobody is named."""
    members, stacks = [], []
    for r in (0, 1):
        pid, threads = _shape("gather", r, native)
        members.append(
            member(
                Role.TRAIN_RANK, pid, cls="MegatronTrainRayActor", method="update_weights", rank=r
            )
        )
        stacks += [as_obs(pid, s, *threads) for s in (0, 1)]
    v = diagnose(snapshot(stacks=tuple(stacks), jobs=(running_job(),)), topology(*members)).verdict
    assert (v.status, v.stage) == (Status.HUNG, Stage.WEIGHT_SYNC), v.summary
    assert v.culprits == ()
    assert "collective-mismatch" not in {f.rule for f in v.findings}  # one collective, all ranks


@pytest.mark.parametrize("native", [False, True], ids=["plain", "native"])
def test_a_later_pipeline_stage_in_its_intake_waits_for_the_first(native: bool) -> None:
    """sgl-project/sglang#17941: one engine with `--pp-size 2` (two real Gloo processes): PP1 waits
    in `_pull_raw_reqs` for PP0's next requests (its intake: a p2p recv under
    `point_to_point_pyobj`), PP0 in `_pp_recv_dict_from_prev_stage` for the last stage's outputs.
    PP1 is waiting for PP0, never the one to blame: the engine is named by PP0's scheduler."""
    members, stacks = [], []
    for r in (0, 1):
        pid, threads = _shape("pp", r, native)
        members.append(member(Role.SGLANG_ENGINE, pid, "scheduler", url=ENGINE_URL))
        stacks += [as_obs(pid, s, *threads) for s in (0, 1)]
    pp0, pp1 = (m.pid for m in members)
    world = build_world(snapshot(stacks=tuple(stacks)), topology(*members))
    intake = world.find(pp1)
    assert intake is not None and intake.latest is not None
    assert intake.latest.primary.in_intake
    assert "previous pipeline stage's next requests" in intake.latest.describe()
    v = diagnose(snapshot(stacks=tuple(stacks), jobs=(running_job(),)), topology(*members)).verdict
    assert v.status is Status.HUNG, v.summary
    (culprit,) = v.culprits
    assert (culprit.role, culprit.pid, culprit.engine_url) == (Role.SGLANG_ENGINE, pp0, ENGINE_URL)
    assert "a collective its pipeline peers never enter" in culprit.why
    assert "they wait in _pull_raw_reqs for its next requests" in culprit.why


def test_blame_leaves_out_a_candidate_that_has_returned_whoever_names_it() -> None:
    """Whatever source names a returned rank (here a suspect as NVML's idle-GPU rule would make
    it, on the recorded world of `train_rank_extra_step`), blame takes it out of the contention and
    says why; the rank that still runs keeps its blame."""
    bundle = DEMO / "train_rank_extra_step.tar.gz"
    a = analyse_bundle(bundle)
    pids = _rank_pids(bundle)
    world = build_world(a.snapshot, a.topology)
    rank0, rank1 = world.find(pids[0]), world.find(pids[1])
    assert rank0 is not None and rank1 is not None
    named = [
        suspect(NVML, Role.TRAIN_RANK, "its GPU is idle", rank0, weight=MEDIUM),
        suspect(NVML, Role.TRAIN_RANK, "its GPU busy-waits", rank1, weight=MEDIUM),
    ]
    blame = assign(merge(named, world), world)
    assert [m.first("pid") for m in blame.candidates if m.score > 0] == [pids[1]]
    assert blame.returned == (world.returned(rank0),)


# --------------------------------------------------------------------------- item 7


def test_a_mutual_wait_with_no_http_is_read_from_rays_task_list(tmp_path: Path) -> None:
    """demo `update_waits_behind_rollout_gate` (NeMo-RL#2694's shape in slime's train_async.py):
    rank 1 waits for rank 0 in the update's barrier, rank 0 in `ray.get` on its
    `recover_updatable_engines`, queued on the RolloutManager behind `generate`, which waits on its
    own gate. Ray's task list (held over both samples) passes the blame from rank 0 to the
    RolloutManager; without the task queries the stacks alone name rank 0, as before issue 34."""
    bundle = DEMO / "update_waits_behind_rollout_gate.tar.gz"
    a = analyse_bundle(bundle)
    v = a.diagnosis.verdict
    rm = next(
        m for m in a.topology.members if m.role is Role.ROLLOUT_MANAGER and m.actor_id is not None
    )
    assert (v.status, v.stage) == (Status.HUNG, Stage.WEIGHT_SYNC), v.summary
    assert [(c.role, c.pid) for c in v.culprits] == [(Role.ROLLOUT_MANAGER, rm.pid)]
    passed = next(f for f in v.findings if f.rule == "blame-passed")
    assert passed.evidence == (
        "train rank 0's update_weights waits for its call recover_updatable_engines, queued on "
        "rollout manager behind the generate it runs",
    )
    assert "its own call keeps the others waiting" in v.culprits[0].why
    kinds = {(w.kind.value, w.waiter.label, w.waited_for.label) for w in a.diagnosis.waits}
    assert ("queue", "train rank 0", "rollout manager") in kinds
    src = unpacked("update_waits_behind_rollout_gate", tmp_path / "src")
    cut = tf.bundle_without_targets(src, tmp_path / "cut", "ray_dashboard", ("tasks_",))
    v = analyse_bundle(cut).diagnosis.verdict
    assert [(c.role, c.rank) for c in v.culprits] == [(Role.TRAIN_RANK, 0)]

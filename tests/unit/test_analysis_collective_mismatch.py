"""Issue 45 item 3: ranks of one group that wait in different collectives are the verdict's cause,
with each side's ranks, collective and call site, read from both samples; no rank is blamed unless
a source tells the sides apart. On recordings (provenance in tests/fixtures/README.md):

- analysis/mismatch/train_mismatch{,-native}.tar.gz: three real Gloo train ranks recorded by the
  real `attach --local` (plain and `--native` py-spy, two samples): ranks 0 and 1 in
  `train_one_step`'s all_reduce (model.py:7), rank 2 in `gather_log_data`'s all_gather_object
  (data.py:6);
- real/local-cpu-gloo-fr-mismatch: slime PR#862's two ranks with torch's flight recorder;
- real/gpu-2xh200-nccl-broadcast-hang: a real NCCL RAS answer (Broadcast launched by one rank).
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from slime_hangdoctor.analysis.diagnosis import diagnose
from slime_hangdoctor.analysis.parts import stacks
from slime_hangdoctor.analysis.readers.pyspy import collective_call
from slime_hangdoctor.analysis.world import build_world
from slime_hangdoctor.parsers.flight_recorder import parse_flight_recorder
from slime_hangdoctor.parsers.nccl_ras import parse_ras
from slime_hangdoctor.parsers.nvml import parse_nvml_series
from slime_hangdoctor.parsers.pyspy import parse_pyspy_json
from slime_hangdoctor.pipeline import analyse_bundle
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.source_spec import Observed
from slime_hangdoctor.verdict import Role, Stage, Status, Verdict
from tests.fixtures import transforms as tf
from tests.unit.analysis_builders import NODE, member, running_job, snapshot, topology
from tests.unit.recorded_stacks import as_obs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MISMATCH = FIXTURES / "analysis" / "mismatch"
FR_MISMATCH = FIXTURES / "real" / "local-cpu-gloo-fr-mismatch"
GPU_REAL = FIXTURES / "real" / "gpu-2xh200-nccl-broadcast-hang"
RAS_REAL = GPU_REAL / "run3_hang.ras.json"
MODEL = "all_reduce at slime/backends/megatron_utils/model.py:7 (train_one_step)"
DATA = "all_gather_object at slime/backends/megatron_utils/data.py:6 (gather_log_data)"
ENGINE = "http://127.0.0.1:31000"


def _verdict(name: str) -> Verdict:
    return analyse_bundle(MISMATCH / f"{name}.tar.gz").diagnosis.verdict


@pytest.mark.parametrize("name", ["train_mismatch", "train_mismatch-native"])
def test_the_mismatch_is_the_headline_with_each_sides_call_site(name: str) -> None:
    """Plain stacks and `--native` ones (where the wait is `c10d::Work::wait` under torch's frames)
    give the same sides: the op the job called (all_gather_object, not the all_gather inside it)
    and the first frame outside the communication layers (signatures.COMM_LAYERS)."""
    v = _verdict(name)
    assert (v.status, v.stage) == (Status.HUNG, Stage.TRAIN), v.summary
    assert v.summary == (
        f"Hung in train step: the train ranks wait in different collectives: train ranks 0, 1 in "
        f"{MODEL}; train rank 2 in {DATA} (nothing tells which side took the wrong path)"
    )
    assert v.extra["summary_by"] == "parts/stacks:collective_mismatch"
    cause = next(f for f in v.findings if f.rule == "collective-mismatch-cause")
    assert cause.by == "parts/stacks:collective_mismatch"
    assert cause.evidence == (
        f"train ranks 0, 1: in {MODEL} (both samples)",
        f"train rank 2: in {DATA} (both samples)",
    )
    assert v.culprits == ()  # no source tells the sides apart: nobody is blamed
    # the weak finding says the same, and how to tell the sides apart
    weak = next(f for f in v.findings if f.rule == "collective-mismatch")
    assert "arm the flight recorder" in weak.message


def _unpacked(name: str, dest: Path) -> Path:
    with tarfile.open(MISMATCH / f"{name}.tar.gz") as tar:
        tar.extractall(dest, filter="data")
    return next(p.parent for p in dest.rglob("manifest.json"))


def test_a_side_must_hold_over_both_samples(tmp_path: Path) -> None:
    """Rank 2 read at the second sample where rank 0 waits (`transforms.bundle_with_stack_like`):
    its collective moved between the samples, so no side stands and there is no cause."""
    src = _unpacked("train_mismatch", tmp_path / "src")
    moved = tf.bundle_with_stack_like(src, tmp_path / "moved", pid=4, sample=1, like=2)
    v = analyse_bundle(moved).diagnosis.verdict
    assert "collective-mismatch-cause" not in {f.rule for f in v.findings}
    assert "wait in different collectives" not in v.summary
    assert (
        "summary_by" not in v.extra or v.extra["summary_by"] != "parts/stacks:collective_mismatch"
    )


def _recorded(name: str) -> tuple[Snapshot, object]:
    a = analyse_bundle(MISMATCH / f"{name}.tar.gz")
    assert a.snapshot is not None and a.topology is not None
    return a.snapshot, a.topology


def test_the_tp_ranks_of_one_engine_are_a_group_too() -> None:
    """The same real processes read as one engine's TP schedulers (`transforms.topology_as_one_
    engine`): the rule is the group's, not the train ranks'."""
    snap, topo = _recorded("train_mismatch")
    v = diagnose(snap, tf.topology_as_one_engine(topo, ENGINE)).verdict
    assert v.summary.endswith(
        f"the TP ranks of engine {ENGINE} wait in different collectives: scheduler TP0 (pid 2), "
        f"scheduler TP1 (pid 3) in {MODEL}; scheduler TP2 (pid 4) in {DATA} (nothing tells "
        "which side took the wrong path)"
    ), v.summary


def test_ras_launch_counts_tell_which_side_entered_a_collective_the_others_never_will() -> None:
    """A real NCCL RAS answer (Broadcast launched by rank 0, none by rank 1; 2x H200) read at both
    samples with the same counts, its ranks moved onto the recording's pids 2 (the all_reduce side)
    and 4 (the all_gather_object side) by `transforms.ras_communicators_joined`: the all_reduce side
    launched a collective the other never did. The weak "nothing says which" finding gives way to
    the cause's account."""
    snap, topo = _recorded("train_mismatch")
    report = tf.ras_communicators_joined((parse_ras(RAS_REAL.read_text()),), {571: 2, 572: 4}, "")
    report = tf.ras_communicators_joined((report,), {2: 2, 4: 4}, None)
    ras = tuple(Observed("nccl_ras", None, s, report) for s in (0, 1))
    joined = Snapshot(snap.manifest, snap.observed + ras)
    world = build_world(joined, topo)  # type: ignore[arg-type]
    (m,) = stacks.collective_mismatches(world)
    ahead, behind = m.sides
    assert [p.pid for p in ahead.procs] == [2, 3] and [p.pid for p in behind.procs] == [4]
    assert m.told == (
        f"NCCL RAS communicator {report.communicators[0].hash}: {ahead.who} launched Broadcast up "
        f"to 1, {behind.who} fewer: it entered a collective the others never will",
    )
    v = diagnose(joined, topo).verdict  # type: ignore[arg-type]
    assert v.summary.endswith(f"({m.told[0]})"), v.summary
    cause = next(f for f in v.findings if f.rule == "collective-mismatch-cause")
    assert m.told[0] in cause.evidence
    assert "collective-mismatch" not in {f.rule for f in v.findings}
    # read at one sample only, the same counts prove nothing (launch skew reads the same)
    once = Snapshot(snap.manifest, snap.observed + ras[1:])
    (m,) = stacks.collective_mismatches(build_world(once, topo))  # type: ignore[arg-type]
    assert m.told == ()


def _fr_world_native(flight_recorder: bool = True, nvml: str | None = None) -> Verdict:
    """slime PR#862's two real Gloo ranks, `--native` stacks (rank 0 in its broadcast handle's
    `c10d::Work::wait` under sync_actor_critic_data, rank 1 in the step's all_reduce) at both
    samples, with both ranks' flight-recorder dumps (or not), and an NVML series (or none)."""
    pids = {int(r): p for r, p in json.loads((FR_MISMATCH / "pids.json").read_text()).items()}
    stacks = tuple(
        as_obs(
            pids[r],
            s,
            *parse_pyspy_json((FR_MISMATCH / f"rank{r}.native.json").read_text()).threads,
        )
        for r in (0, 1)
        for s in (0, 1)
    )
    flight = tuple(
        Observed(
            "flight_recorder",
            "10.0.0.1",
            0,
            parse_flight_recorder(
                (FR_MISMATCH / f"fr_mismatch_rank_{r}.pkl").read_bytes(), rank=r, pid=pids[r]
            ),
        )
        for r in (0, 1)
        if flight_recorder
    )
    gpus = (Observed("nvml", NODE, 0, parse_nvml_series(nvml)),) if nvml is not None else ()
    topo = topology(
        *(
            member(Role.TRAIN_RANK, pids[r], cls="MegatronTrainRayActor", method="train", rank=r)
            for r in (0, 1)
        )
    )
    snap = snapshot(stacks=stacks, flight=flight, jobs=(running_job(),), observed=gpus)
    return diagnose(snap, topo).verdict


def test_the_flight_recorder_tells_each_side_and_the_headline_is_the_mismatch() -> None:
    """The flight recorder's sequence numbers say what each side entered that the other never
    did; its own findings and culprits (both ranks, each behind in the group the other waits in)
    stand beside the one headline, which the cause's rule decided."""
    v = _fr_world_native()
    assert v.summary.startswith(
        "Hung in train step: the train ranks wait in different collectives: train rank 0 in "
        "c10d::Work::wait at slime/backends/megatron_utils/data.py:"
    ), v.summary
    assert "train rank 1 in all_reduce at slime/backends/megatron_utils/model.py:" in v.summary
    assert v.extra["summary_by"] == "parts/stacks:collective_mismatch"
    cause = next(f for f in v.findings if f.rule == "collective-mismatch-cause")
    told = [e for e in cause.evidence if e.startswith("flight recorder")]
    assert any(
        e.startswith("flight recorder: train rank 0 entered gloo:broadcast #2")
        and "which train rank 1 never entered" in e
        for e in told
    ), told
    assert any(
        e.startswith("flight recorder: train rank 1 entered gloo:all_reduce #4")
        and "which train rank 0 never entered" in e
        for e in told
    ), told
    assert sorted(c.rank for c in v.culprits) == [0, 1]  # the flight recorder's, as before
    assert "fr-collective-not-joined" in {f.rule for f in v.findings}


def test_a_gpu_spinning_in_a_collective_beside_an_idle_one_tells_the_sides_apart() -> None:
    """No flight recorder; the real NVML series of the H200 train-stuck run (GPU 0 busy-waiting in
    an NCCL collective: util 100 %, memory util 0; GPU 1 idle), its processes moved onto PR#862's
    ranks (`transforms.nvml_pids_relabelled`: GPU 0 to rank 1, in the step's all_reduce; GPU 1 to
    rank 0, waiting on its broadcast handle): rank 1 entered a collective on its GPU that rank 0,
    waiting on its CPU, never did. Each reading alone, the sides' GPUs alike, tells nothing."""
    pids = {int(r): p for r, p in json.loads((FR_MISMATCH / "pids.json").read_text()).items()}
    real = (GPU_REAL / "run3_train_stuck.nvml.json").read_text()
    v = _fr_world_native(False, tf.nvml_pids_relabelled(real, {708: pids[1], 709: pids[0]}))
    cause = next(f for f in v.findings if f.rule == "collective-mismatch-cause")
    (told,) = [e for e in cause.evidence if e.startswith("NVML")]
    assert told.startswith("NVML: the GPUs of train rank 1 busy-wait in a collective kernel (GPU 0")
    assert told.endswith(
        "while those of train rank 0 are idle: train rank 1 entered a collective the others "
        "never will"
    )
    assert v.summary.endswith(f"({told})"), v.summary
    assert "collective-mismatch" not in {f.rule for f in v.findings}
    # both GPUs busy-waiting (GPU 1 read as GPU 0, `transforms.nvml_gpu_like` on the series):
    # nothing tells the sides apart, nobody is blamed
    both = tf.nvml_pids_relabelled(real, {708: pids[1], 709: pids[0]})
    v = _fr_world_native(False, tf.nvml_gpu_like(both, gpu=1, like=0))
    assert v.summary.endswith("(nothing tells which side took the wrong path)"), v.summary
    assert v.culprits == ()


def test_the_call_site_is_the_first_frame_outside_the_communication_layers() -> None:
    """On the recording's rank 2 (plain and --native): torch's all_gather inside all_gather_object
    and c10d_logger's wrapper are passed over; the call is `all_gather_object`, issued at
    gather_log_data (data.py:6)."""
    snap, topo = _recorded("train_mismatch-native")
    world = build_world(snap, topo)  # type: ignore[arg-type]
    rank2 = world.train_rank(2)
    assert rank2 is not None and rank2.latest is not None
    call = collective_call(rank2.latest.primary)
    assert call is not None and call.where == DATA
    assert [m.text for m in stacks.collective_mismatches(world)] == [
        f"the train ranks wait in different collectives: train ranks 0, 1 in {MODEL}; "
        f"train rank 2 in {DATA}"
    ]


@pytest.mark.parametrize("native", [False, True], ids=["plain", "native"])
def test_sglangs_parallel_state_is_a_communication_layer(native: bool) -> None:
    """A real Gloo process whose scheduler waits in torch's recv under SGLang's
    `GroupCoordinator.recv_tensor_dict` (sglang/srt/distributed/parallel_state.py, blame-shapes'
    `pp` rank 0): the collective is SGLang's `recv_tensor_dict`, issued by the scheduler's
    `_pp_recv_dict_from_prev_stage`."""
    shapes = FIXTURES / "real" / "blame-shapes"
    suffix = ".native" if native else ""
    stack = parse_pyspy_json((shapes / f"pp_rank0{suffix}.json").read_text())
    world = build_world(snapshot(stacks=(as_obs(7, 0, *stack.threads),)), topology())
    proc = world.find(7, NODE)
    assert proc is not None and proc.latest is not None
    call = collective_call(proc.latest.primary)
    assert call is not None and call.op == "recv_tensor_dict"
    assert call.where.startswith(
        "recv_tensor_dict at sglang/srt/managers/scheduler_pp_mixin.py:"
    ) and call.where.endswith("(_pp_recv_dict_from_prev_stage)")


def test_summary_by_names_the_culprits_rule_where_a_culprit_decided() -> None:
    """Where no cause is the answer, the summary is the first culprit's first reason, and
    `extra.summary_by` names that reason's rule (demo `train_rank_extra_step`: rank 1 in an
    all_reduce its finished peer never enters; not a mismatch, one side has returned)."""
    v = analyse_bundle(FIXTURES / "analysis" / "demo" / "train_rank_extra_step.tar.gz")
    verdict = v.diagnosis.verdict
    assert verdict.culprits and "wait in different collectives" not in verdict.summary
    assert verdict.extra["summary_by"] == verdict.culprits[0].by[0]
    assert verdict.culprits[0].why.split(" | ")[0] in verdict.summary


def test_the_reports_name_the_rule_that_decided_the_summary() -> None:
    """Markdown and HTML print the summary's rule beside it, as they print each finding's."""
    from slime_hangdoctor.render.html import render_html
    from slime_hangdoctor.render.markdown import render_markdown

    d = analyse_bundle(MISMATCH / "train_mismatch.tar.gz").diagnosis
    md = render_markdown(d).splitlines()[2]
    assert md.startswith("**Hung in train step: the train ranks wait in different collectives")
    assert md.endswith("** · by `parts/stacks:collective_mismatch`")
    html = render_html(d)
    assert '<span class="by">by <code>parts/stacks:collective_mismatch</code></span></p>' in html


def test_a_culprit_the_mismatch_does_not_explain_keeps_the_headline(tmp_path: Path) -> None:
    """The recording's three ranks beside the demo job `rollout_engine_stuck` (its stuck engine
    the culprit; its own train ranks' stacks left out by `transforms.bundle_without_targets`,
    the two recordings' facts in one snapshot): the mismatch is still a finding, but the engine,
    which it does not explain, keeps the headline and decides it."""
    from slime_hangdoctor.topology import build_topology
    from tests.unit.demo_bundles import unpacked

    demo = tf.bundle_without_targets(
        unpacked("rollout_engine_stuck", tmp_path / "demo"),
        tmp_path / "cut",
        "pyspy",
        ("pid2999", "pid2933"),
    )
    a, b = analyse_bundle(MISMATCH / "train_mismatch.tar.gz"), analyse_bundle(demo)
    assert a.snapshot is not None and b.snapshot is not None
    joined = Snapshot(b.snapshot.manifest, b.snapshot.observed + a.snapshot.observed)
    v = diagnose(joined, build_topology(joined)).verdict
    assert "collective-mismatch-cause" in {f.rule for f in v.findings}
    assert v.culprits[0].pid == 2870 and "wait in different collectives" not in v.summary
    assert v.extra["summary_by"] == v.culprits[0].by[0]


def test_ranks_in_the_request_intake_are_a_side_only_beside_peers_mid_batch() -> None:
    """demo_native `rollout_tp_ranks_diverged` (sglang#27221, recorded `--native`): engine 24147's
    TP2 and TP3 wait in the request broadcast while TP0 and TP1 wait in the decode's collective:
    two sides, the intake's call site the scheduler's frame that called broadcast_pyobj. The
    other engine of the same recording is idle, every rank in its intake: no side, no mismatch."""
    bundle = FIXTURES / "analysis" / "demo_native" / "rollout_tp_ranks_diverged.tar.gz"
    result = analyse_bundle(bundle)
    world = build_world(result.snapshot, result.topology)
    [m] = stacks.collective_mismatches(world)
    assert m.group == "the TP ranks of engine http://127.0.0.1:24147"
    assert [[p.pid for p in s.procs] for s in m.sides] == [[20783, 20785], [20786, 20787]]
    assert [s.intake for s in m.sides] == [False, True]
    site = m.sides[1].call.site
    assert site is not None and (site.name, site.line) == (
        "SchedulerRequestReceiver._broadcast_reqs_across_ranks",
        58,
    )
    assert m.told == ()  # nothing tells the sides apart

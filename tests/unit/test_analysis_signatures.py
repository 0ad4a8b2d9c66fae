"""Stage signatures on stacks that real processes produced (issue 21): every signature row the stage
decision uses, read on a recorded thread of the demo bundles, the GPU fixture bundles or the
stage-shapes capture (tests/fixtures/real/stage-shapes/: stand-in chains with slime's, Megatron's and
SGLang's names and files, parked in a real wait; Megatron's save into torch's real gather_object), plain
and `--native`; wait primitives recognised on recorded threads; the tables are consistent data.

Variants come only from tests/fixtures/transforms/ (`bare_frame_names`: py-spy on Python < 3.11;
`innermost_frames`: the same wait under a caller the tables do not know)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from slime_hangdoctor.analysis import signatures as sg
from slime_hangdoctor.analysis.readers.pyspy import find_block, find_stage
from slime_hangdoctor.facts import Frame
from slime_hangdoctor.parsers.pyspy import ThreadStack, parse_pyspy_json
from slime_hangdoctor.verdict import Stage
from tests.fixtures import transforms as tf
from tests.unit.recorded_stacks import (
    BUNDLES,
    DEMO_NATIVE,
    checkpoint_rank,
    demo,
    gloo_dump,
    gloo_rank,
    recorded_thread,
    shape_thread,
)

GPU_BCAST = BUNDLES / "gpu-2xh200-nccl-broadcast-hang"
FSDP = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "fsdp-allgather"
OFFLOAD_PAUSE_ACTOR = 14920  # engine 1's SGLangEngine actor in the offload_pause_stuck recording
WEDGED_NATIVE = DEMO_NATIVE / "weight_sync_engine_wedged.tar.gz"


def _demo(
    name: str, pid: int, thread: str = "MainThread", sample: int = 0
) -> Callable[[], ThreadStack]:
    return lambda: recorded_thread(demo(name), pid, thread, sample)


def _shape(label: str) -> Callable[[], ThreadStack]:
    return lambda: shape_thread(label)


def _frames(get: Callable[[], ThreadStack]) -> tuple[Frame, ...]:
    return get().frames


def _bare(get: Callable[[], ThreadStack]) -> Callable[[], tuple[Frame, ...]]:
    return lambda: tf.bare_frame_names(get().frames)


def _dcp_alone() -> tuple[Frame, ...]:
    """Checkpoint rank 0 cut above torch DCP's `_DistWrapper.gather_object`: torch's DCP under a
    caller the tables do not know (a user's own trainer)."""
    frames = checkpoint_rank(0).frames
    k = next(i for i, f in enumerate(frames) if f.name == "_DistWrapper.gather_object")
    return tf.innermost_frames(frames, k + 1)


def _fsdp_rank(rank: int) -> ThreadStack:
    """A rank of tests/fixtures/real/fsdp-allgather (capture_fsdp_allgather.py): two real FSDP2
    ranks whose micro-batch counts differ (verl PR#5591 / #5451)."""
    dump = parse_pyspy_json((FSDP / f"rank{rank}.json").read_text())
    return next(t for t in dump.threads if t.name == "MainThread")


# (label, the recorded thread's frames, expected stage). Pids are the recordings' own.
CASES: list[tuple[str, Callable[[], tuple[Frame, ...]], Stage]] = [
    # --- engine startup (driver, RolloutManager [Jan] / [HEAD], SGLangEngine)
    ("driver startup", lambda: _frames(_demo("startup_engine_never_healthy", 743)), Stage.STARTUP),
    (
        "driver placement group",
        lambda: _frames(_demo("placement_infeasible", 25763)),
        Stage.STARTUP,
    ),
    ("RM init Jan", lambda: _frames(_shape("RM init Jan")), Stage.STARTUP),
    ("RM init HEAD", lambda: _frames(_shape("RM init HEAD")), Stage.STARTUP),
    ("HEAD start servers", lambda: _frames(_shape("HEAD start servers")), Stage.STARTUP),
    (
        "engine healthy wait",
        lambda: _frames(_demo("startup_engine_never_healthy", 834)),
        Stage.STARTUP,
    ),
    (
        "engine healthy wait py3.10",
        _bare(_demo("startup_engine_never_healthy", 834)),
        Stage.STARTUP,
    ),
    # --- rollout dispatch / generation
    (
        "RM generate main",
        lambda: _frames(_demo("engine_paused_by_update", 24105)),
        Stage.ROLLOUT_DISPATCH,
    ),
    ("coroutine visible", lambda: _frames(_shape("coroutine visible")), Stage.ROLLOUT_DISPATCH),
    ("abort Jan", lambda: _frames(_shape("abort Jan")), Stage.ROLLOUT_DISPATCH),
    ("abort HEAD", lambda: _frames(_shape("abort HEAD")), Stage.ROLLOUT_DISPATCH),
    ("convert", lambda: _frames(_shape("convert")), Stage.ROLLOUT_DISPATCH),
    ("scheduler batch", lambda: _frames(_shape("scheduler batch")), Stage.ROLLOUT_DISPATCH),
    (
        "scheduler decode (demo)",
        lambda: _frames(_demo("rollout_engine_stuck", 2870)),
        Stage.ROLLOUT_DISPATCH,
    ),
    # --- reward
    (
        "sympy reward",
        lambda: _frames(_demo("reward_hang", 4581, "Thread-1 (_start_loop)")),
        Stage.REWARD,
    ),
    ("custom rm via async_rm", lambda: _frames(_shape("custom rm via async_rm")), Stage.REWARD),
    # --- rollout offload / onload
    ("RM offload", lambda: _frames(_shape("RM offload")), Stage.OFFLOAD_ONLOAD),
    ("engine release", lambda: _frames(_shape("engine release")), Stage.OFFLOAD_ONLOAD),
    (
        "engine flush inside release",
        lambda: _frames(_shape("engine flush inside release")),
        Stage.OFFLOAD_ONLOAD,
    ),
    # slime PR#2015 (open): the offload pauses generation first; the pause inside
    # release_memory_occupation is the offload's (demo offload_pause_stuck, the engine actor)
    (
        "engine pause inside release (demo)",
        lambda: _frames(_demo("offload_pause_stuck", OFFLOAD_PAUSE_ACTOR)),
        Stage.OFFLOAD_ONLOAD,
    ),
    (
        "HEAD server group onload",
        lambda: _frames(_shape("HEAD server group onload")),
        Stage.OFFLOAD_ONLOAD,
    ),
    ("scheduler release", lambda: _frames(_shape("scheduler release")), Stage.OFFLOAD_ONLOAD),
    # --- data fetch / wake-sleep / log-prob / train step -> train
    ("data fetch", lambda: _frames(_demo("train_rank_stuck", 6037)), Stage.TRAIN),
    ("train step all_reduce", lambda: _frames(_demo("train_rank_stuck", 5981)), Stage.TRAIN),
    (
        "train step (GPU reproducer)",
        lambda: recorded_thread(BUNDLES / "gpu-2xh200-nccl-train-stuck", 708).frames,
        Stage.TRAIN,
    ),
    (
        "whiten all_reduce (slime PR#393)",
        lambda: gloo_rank("whiten", 0).frames,
        Stage.TRAIN,
    ),
    ("whiten all_reduce --native", lambda: gloo_rank("whiten", 1, native=True).frames, Stage.TRAIN),
    ("PP recv", lambda: gloo_rank("whiten", 2).frames, Stage.TRAIN),
    ("gather log data (gloo)", lambda: gloo_rank("mixed", 2).frames, Stage.TRAIN),
    ("CP all-gather of the loss (PR #2123)", lambda: gloo_rank("cp", 0).frames, Stage.TRAIN),
    ("CP all-gather --native", lambda: gloo_rank("cp", 1, native=True).frames, Stage.TRAIN),
    ("wake up", lambda: _frames(_shape("wake up")), Stage.TRAIN),
    ("sleep", lambda: _frames(_shape("sleep")), Stage.TRAIN),
    ("log prob PP", lambda: _frames(_shape("log prob PP")), Stage.TRAIN),
    ("train step collective", lambda: _frames(_shape("train step collective")), Stage.TRAIN),
    ("gather log data", lambda: _frames(_shape("gather log data")), Stage.TRAIN),
    # --- weight sync (colocate)
    ("colocate update", lambda: _frames(_demo("colocate_update_hang", 7665)), Stage.WEIGHT_SYNC),
    ("bridge export Jan", lambda: _frames(_shape("bridge export Jan")), Stage.WEIGHT_SYNC),
    (
        "reload inside update_weights",
        lambda: _frames(_shape("reload inside update_weights")),
        Stage.WEIGHT_SYNC,
    ),
    (
        "engine tensor update",
        lambda: _frames(_demo("colocate_update_hang", 7367)),
        Stage.WEIGHT_SYNC,
    ),
    ("driver weight sync", lambda: _frames(_demo("colocate_update_hang", 7205)), Stage.WEIGHT_SYNC),
    (
        "scheduler IPC update",
        lambda: _frames(_demo("colocate_update_hang", 7573)),
        Stage.WEIGHT_SYNC,
    ),
    # --- weight sync (distributed): group init is weight_sync, the broadcast is nccl_broadcast
    ("group init", lambda: _frames(_demo("actor_queue_cycle", 22353)), Stage.WEIGHT_SYNC),
    ("TP gather Jan", lambda: _frames(_shape("TP gather Jan")), Stage.WEIGHT_SYNC),
    (
        "barrier of non-source ranks",
        lambda: _frames(_demo("weight_sync_engine_missing", 30339)),
        Stage.WEIGHT_SYNC,
    ),
    (
        "engine actor group init",
        lambda: _frames(_demo("actor_queue_cycle", 21687)),
        Stage.WEIGHT_SYNC,
    ),
    ("scheduler group init", lambda: _frames(_demo("actor_queue_cycle", 22202)), Stage.WEIGHT_SYNC),
    (
        "broadcast",
        lambda: _frames(_demo("weight_sync_engine_missing", 30272)),
        Stage.NCCL_BROADCAST,
    ),
    (
        "broadcast --native",
        lambda: recorded_thread(WEDGED_NATIVE, 11671).frames,
        Stage.NCCL_BROADCAST,
    ),
    ("lock spin", lambda: _frames(_shape("lock spin")), Stage.NCCL_BROADCAST),
    (
        "engine actor broadcast",
        lambda: _frames(_demo("weight_sync_engine_missing", 30129)),
        Stage.NCCL_BROADCAST,
    ),
    (
        "scheduler in handle.wait() (0.5.15 async broadcast)",
        lambda: _frames(_demo("weight_sync_engine_wedged", 11598)),
        Stage.NCCL_BROADCAST,
    ),
    (
        "scheduler in handle.wait() --native",
        lambda: recorded_thread(WEDGED_NATIVE, 11598).frames,
        Stage.NCCL_BROADCAST,
    ),
    (
        "scheduler broadcast 0.5.15",
        lambda: _frames(_shape("scheduler broadcast 0.5.15")),
        Stage.NCCL_BROADCAST,
    ),
    (
        "scheduler broadcast 0.5.21",
        lambda: _frames(_shape("scheduler broadcast 0.5.21")),
        Stage.NCCL_BROADCAST,
    ),
    # --- eval
    ("eval main", lambda: _frames(_demo("eval_hang", 9298)), Stage.EVAL),
    ("eval loop", lambda: _frames(_shape("eval loop")), Stage.EVAL),
    # --- checkpoint save / load
    (
        "save in dist_checkpointing async plan (slime#1908)",
        lambda: checkpoint_rank(0).frames,
        Stage.CHECKPOINT,
    ),
    (
        "save in dist_checkpointing async plan --native",
        lambda: checkpoint_rank(1, native=True).frames,
        Stage.CHECKPOINT,
    ),
    ("torch DCP under an unknown trainer", _dcp_alone, Stage.CHECKPOINT),
    (
        "HEAD save_model finalising an async save",
        lambda: _frames(_shape("HEAD save_model finalising an async save")),
        Stage.CHECKPOINT,
    ),
    ("shard write", lambda: _frames(_demo("checkpoint_slow_storage", 12361)), Stage.CHECKPOINT),
    (
        "checkpoint load at startup",
        lambda: _frames(_shape("checkpoint load at startup")),
        Stage.CHECKPOINT,
    ),
    (
        "driver save_model",
        lambda: _frames(_demo("checkpoint_slow_storage", 12192)),
        Stage.CHECKPOINT,
    ),
    ("driver save Jan", lambda: _frames(_shape("driver save Jan")), Stage.CHECKPOINT),
    (
        "rollout manager data-source save",
        lambda: _frames(_shape("rollout manager data-source save")),
        Stage.CHECKPOINT,
    ),
    # --- FT recovery -> startup
    ("FT recover Jan", lambda: _frames(_shape("FT recover Jan")), Stage.STARTUP),
    ("FT recover HEAD", lambda: _frames(_shape("FT recover HEAD")), Stage.STARTUP),
    # --- slime's FSDP backend (January 2026 layout): the demo's rank in its extra micro-batch's
    # collective, and a real FSDP2 rank in the parameters' all-gather under slime's FSDP frames
    (
        "FSDP extra micro-batch (demo)",
        lambda: _frames(_demo("train_fsdp_microbatch_diverged", 27611)),
        Stage.TRAIN,
    ),
    ("FSDP2 all-gather under _train_step", lambda: _fsdp_rank(1).frames, Stage.TRAIN),
]


@pytest.mark.parametrize(("label", "frames", "stage"), CASES, ids=[c[0] for c in CASES])
def test_recorded_stack_maps_to_its_stage(
    label: str, frames: Callable[[], tuple[Frame, ...]], stage: Stage
) -> None:
    found, index, sig = find_stage(frames())
    assert found is stage, (label, sig)
    assert index is not None


def test_every_signature_row_the_stage_decision_uses_is_read_on_a_recording() -> None:
    """No stage row is left to a stack we wrote ourselves: each stage has recorded cases above."""
    assert {c[2] for c in CASES} == set(Stage) - {Stage.NONE, Stage.UNKNOWN}


def test_bare_frame_names_map_to_the_same_stage() -> None:
    """torch's flight recorder records each frame's bare `co_name` (the real H200 FR pickle names
    `_exception_logger.<locals>.wrapper` just `wrapper`), and so does py-spy on Python < 3.11; the
    stage the FR decides from (decide_stage's FR rule) must not depend on py-spy's qualified names."""
    for label, frames, stage in CASES:
        assert find_stage(tf.bare_frame_names(frames()))[0] is stage, label


def test_qualified_method_matches_in_a_copied_file() -> None:
    """A slime method in a file the tables do not expect (the Ray reproducer's driver.py) still
    matches by its class-qualified name (py-spy on Python >= 3.11); by its bare name it does not."""
    frames = recorded_thread(BUNDLES / "gpu-2xh200-ray-nccl-busy", 4121).frames
    assert frames[1].name == "MegatronTrainRayActor.update_weights"
    assert find_stage(frames)[0] is Stage.WEIGHT_SYNC
    assert find_stage(tf.bare_frame_names(frames))[0] is None


def test_the_innermost_matching_frame_decides_not_the_top_frame() -> None:
    """The real NCCL broadcast hang: rank 0 shows `synchronize`; its caller decides."""
    stage, index, _ = find_stage(recorded_thread(GPU_BCAST, 571).frames)
    assert (stage, index) == (Stage.NCCL_BROADCAST, 1)


def test_generic_rows_yield_to_an_outer_specific_frame() -> None:
    frames = shape_thread("bridge export over a forward step").frames
    k = next(i for i, f in enumerate(frames) if f.name == "forward_step")
    assert find_stage(tf.innermost_frames(frames, k + 1))[0] is Stage.TRAIN
    assert find_stage(frames)[0] is Stage.WEIGHT_SYNC


def test_an_fsdp2_all_gather_is_train_under_slimes_fsdp_step_and_alone() -> None:
    """verl PR#5591's shape on real FSDP2 ranks: the rank in its extra micro-batch waits in the
    parameters' all-gather of the forward pre-hook (torch/distributed/fsdp/), a collective; slime's
    `_train_step` decides the stage, and without slime's frames (a hook on autograd's thread, or a
    trainer the tables do not know) the generic FSDP row still says train."""
    t = _fsdp_rank(1)
    stage, index, sig = find_stage(t.frames)
    assert stage is Stage.TRAIN and sig is not None and not sig.generic
    assert t.frames[index or 0].name == "FSDPTrainRayActor._train_step"
    assert find_block(t.frames, t.active)[0] is sg.Block.COLLECTIVE
    k = next(i for i, f in enumerate(t.frames) if f.name == "FSDPState._pre_forward")
    alone = tf.innermost_frames(t.frames, k + 1)
    stage, _, sig = find_stage(alone)
    assert stage is Stage.TRAIN and sig is not None and sig.generic
    # the rank that left its loop holds no FSDP or slime frame: it names no stage
    assert find_stage(_fsdp_rank(0).frames)[0] is None


def test_a_pause_is_the_offloads_inside_release_and_a_weight_syncs_alone() -> None:
    """slime PR#2015: `SGLangEngine.release_memory_occupation` pauses generation first. The pause
    and continue rows are generic: under the release the offload decides (before them, the stuck
    pause read `weight_sync`); the same pause as a Ray call of its own (a weight update's
    `engine.pause_generation.remote()`: no outer slime frame) is still `weight_sync`."""
    frames = _frames(_demo("offload_pause_stuck", OFFLOAD_PAUSE_ACTOR))
    k = next(i for i, f in enumerate(frames) if f.name == "SGLangEngine.pause_generation")
    r = next(i for i, f in enumerate(frames) if f.name == "SGLangEngine.release_memory_occupation")
    assert k < r  # the pause under the release (Ray's tracing wrapper between them)
    stage, index, _ = find_stage(frames)
    assert (stage, index) == (Stage.OFFLOAD_ONLOAD, r)
    stage, index, sig = find_stage(tf.innermost_frames(frames, k + 1))
    assert (stage, index) == (Stage.WEIGHT_SYNC, k) and sig is not None and sig.generic


def test_unrelated_frames_have_no_stage() -> None:
    assert find_stage(recorded_thread(GPU_BCAST, 572).frames)[0] is None  # never_join
    native = gloo_dump("native0.txt").threads[0].frames
    assert [f for f in native if f.native and sg.match_frame(f) is not None] == []


def test_layout_specific_rows_belong_to_their_layout() -> None:
    def frame(label: str, name: str) -> Frame:
        return next(f for f in shape_thread(label).frames if f.name == name)

    jan = sg.match_frame(frame("RM init Jan", "init_rollout_engines"))
    head = sg.match_frame(frame("HEAD start servers", "start_rollout_servers"))
    assert jan is not None and sg.layouts_of(jan) == ("2026-01",)
    assert head is not None and sg.layouts_of(head) == ("2026-08",)
    assert sg.layout_hint(frame("wake up", "timer.<locals>.wrapper")) == "2026-01"
    assert sg.layout_hint(frame("sleep", "timer.<locals>.wrapper")) == "2026-08"


def test_tables_never_give_one_shape_two_stages() -> None:
    seen: dict[tuple[str, str | None, str | None, bool], Stage] = {}
    for layout in sg.LAYOUTS.values():
        for sig in layout.frames:
            key = (sig.func, sig.file, sig.cls, sig.generic)
            assert seen.setdefault(key, sig.stage) is sig.stage, key
    methods: dict[tuple[str, str], Stage] = {}
    for layout in sg.LAYOUTS.values():
        for m in layout.methods:
            assert methods.setdefault((m.cls, m.method), m.stage) is m.stage


def test_every_stage_but_none_and_unknown_has_rows_and_methods_cover_the_actors() -> None:
    stages = {sig.stage for sig in sg.ALL_FRAME_SIGS}
    assert stages == set(Stage) - {Stage.NONE, Stage.UNKNOWN}
    for cls in ("MegatronTrainRayActor", "RolloutManager", "SGLangEngine"):
        assert any(
            sg.method_stage(cls, m.method) for m in sg.LAYOUTS["2026-08"].methods if m.cls == cls
        )
    assert sg.method_stage("MegatronTrainRayActor", "update_weights") is not None
    sig = sg.method_stage("SGLangEngine", "update_weights_from_distributed")
    assert sig is not None and sig.stage is Stage.NCCL_BROADCAST
    assert sg.method_stage("RolloutManager", "no_such_method") is None
    for cls, method in (("MegatronTrainRayActor", "save_model"), ("RolloutManager", "save")):
        sig = sg.method_stage(cls, method)
        assert sig is not None and sig.stage is Stage.CHECKPOINT


# (the recorded thread, expected block, index of the frame that decided it). The thread's own
# `active` flag, as py-spy recorded it, is used.
WAITS: list[tuple[str, Callable[[], ThreadStack], sg.Block, int]] = [
    ("gloo broadcast", lambda: gloo_dump("json0.txt").threads[0], sg.Block.COLLECTIVE, 0),
    (
        "gloo broadcast --native",
        lambda: gloo_dump("native0.txt").threads[0],
        sg.Block.COLLECTIVE,
        3,
    ),
    ("checkpoint gather_object", lambda: checkpoint_rank(0), sg.Block.COLLECTIVE, 0),
    (
        "checkpoint gather_object --native",
        lambda: checkpoint_rank(0, native=True),
        sg.Block.COLLECTIVE,
        3,
    ),
    ("PP recv", lambda: gloo_rank("whiten", 2), sg.Block.COLLECTIVE, 0),
    ("differentiable all_reduce (CP)", lambda: gloo_rank("cp", 0), sg.Block.COLLECTIVE, 0),
    ("CUDA sync (H200)", lambda: recorded_thread(GPU_BCAST, 571), sg.Block.CUDA_SYNC, 0),
    ("ray.get", _demo("startup_engine_never_healthy", 743), sg.Block.RAY_GET, 0),
    ("HTTP", _demo("colocate_update_hang", 7367), sg.Block.HTTP, 0),
    (
        "event loop",
        _demo("engine_paused_by_update", 24105, "Thread-1 (_start_loop)"),
        sg.Block.EVENT_LOOP,
        0,
    ),
    ("future", _demo("engine_paused_by_update", 24105), sg.Block.WAIT, 0),
    ("rendezvous", _demo("actor_queue_cycle", 22353), sg.Block.RENDEZVOUS, 0),
    ("idle Ray worker", _demo("actor_queue_cycle", 21327), sg.Block.IDLE_WORKER, 0),
    ("parked", lambda: recorded_thread(GPU_BCAST, 572), sg.Block.PARKED, 0),
    ("user code on the CPU", _demo("train_custom_loss_stuck", 12969), sg.Block.CPU, 0),
    # library code running under an event loop is work, not a wait
    (
        "sympy under the event loop",
        _demo("reward_hang", 4581, "Thread-1 (_start_loop)"),
        sg.Block.CPU,
        0,
    ),
    (
        "time.sleep --native",
        lambda: recorded_thread(WEDGED_NATIVE, 11620),
        sg.Block.SLEEP,
        0,
    ),
]


@pytest.mark.parametrize(("label", "thread", "block", "index"), WAITS, ids=[w[0] for w in WAITS])
def test_what_a_recorded_thread_is_blocked_on(
    label: str, thread: Callable[[], ThreadStack], block: sg.Block, index: int
) -> None:
    t = thread()
    assert find_block(t.frames, t.active) == (block, index), label

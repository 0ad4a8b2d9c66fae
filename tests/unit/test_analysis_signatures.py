"""Stage signatures: every row of slime.md §8 (both source layouts) and the SGLang scheduler frames of
sglang.md §5 map to one stage; wait primitives are recognised; the tables are consistent data."""

from __future__ import annotations

import pytest

from slime_hangdoctor.analysis import signatures as sg
from slime_hangdoctor.analysis.stacks import find_block, find_stage
from slime_hangdoctor.facts import Frame
from slime_hangdoctor.verdict import Stage
from tests.unit.analysis_builders import RAY_ACTOR_TAIL, F, N

S = Stage

# (innermost-first frames as (qualified name, short file), expected stage). Frame names as py-spy
# prints them on Python >= 3.11 (qualified) and on older Pythons (bare), files from slime.md.
CASES: list[tuple[str, list[tuple[str, str]], Stage]] = [
    # --- engine startup (driver, RolloutManager [Jan] / [HEAD], SGLangEngine)
    (
        "driver startup",
        [
            ("get", "ray/_private/worker.py"),
            ("create_rollout_manager", "slime/ray/placement_group.py"),
            ("train", "train.py"),
        ],
        S.STARTUP,
    ),
    (
        "RM init Jan",
        [
            ("get", "ray/_private/worker.py"),
            ("init_rollout_engines", "slime/ray/rollout.py"),
            ("RolloutManager.__init__", "slime/ray/rollout.py"),
        ],
        S.STARTUP,
    ),
    (
        "RM init HEAD",
        [("get", "ray/_private/worker.py"), ("RolloutManager.__init__", "slime/ray/rollout.py")],
        S.STARTUP,
    ),
    (
        "HEAD start servers",
        [
            ("ServerGroup.start_engines", "slime/ray/rollout.py"),
            ("start_rollout_servers", "slime/ray/rollout.py"),
        ],
        S.STARTUP,
    ),
    (
        "engine healthy wait",
        [
            ("_wait_server_healthy", "slime/backends/sglang_utils/sglang_engine.py"),
            ("SGLangEngine._init_normal", "slime/backends/sglang_utils/sglang_engine.py"),
            ("SGLangEngine.init", "slime/backends/sglang_utils/sglang_engine.py"),
        ],
        S.STARTUP,
    ),
    (
        "engine healthy wait py3.10",
        [
            ("_wait_server_healthy", "slime/backends/sglang_utils/sglang_engine.py"),
            ("_init_normal", "slime/backends/sglang_utils/sglang_engine.py"),
        ],
        S.STARTUP,
    ),
    # --- rollout dispatch / generation
    (
        "RM generate main",
        [
            ("result", "concurrent/futures/_base.py"),
            ("AsyncLoopThread.run", "slime/utils/async_utils.py"),
            ("run", "slime/utils/async_utils.py"),
            ("generate_rollout", "slime/rollout/sglang_rollout.py"),
            ("call_rollout_fn", "slime/rollout/base_types.py"),
            ("RolloutManager._get_rollout_data", "slime/ray/rollout.py"),
            ("RolloutManager.generate", "slime/ray/rollout.py"),
        ],
        S.ROLLOUT_DISPATCH,
    ),
    (
        "coroutine visible",
        [
            ("generate", "slime/rollout/sglang_rollout.py"),
            ("generate_and_rm", "slime/rollout/sglang_rollout.py"),
        ],
        S.ROLLOUT_DISPATCH,
    ),
    # --- reward
    (
        "sympy reward",
        [
            ("simplify", "sympy/simplify/simplify.py"),
            ("are_equal_under_sympy", "slime/rollout/rm_hub/math_utils.py"),
            ("grade_answer_verl", "slime/rollout/rm_hub/math_utils.py"),
            ("async_rm", "slime/rollout/rm_hub/__init__.py"),
            ("generate_and_rm", "slime/rollout/sglang_rollout.py"),
            ("_run_once", "asyncio/base_events.py"),
            ("AsyncLoopThread._start_loop", "slime/utils/async_utils.py"),
        ],
        S.REWARD,
    ),
    (
        "custom rm via async_rm",
        [
            ("my_reward", "/job/my_rm.py"),
            ("async_rm", "slime/rollout/rm_hub/__init__.py"),
            ("generate_and_rm", "slime/rollout/sglang_rollout.py"),
        ],
        S.REWARD,
    ),
    # --- abort tail / convert
    (
        "abort Jan",
        [
            ("abort", "slime/rollout/sglang_rollout.py"),
            ("generate_rollout_async", "slime/rollout/sglang_rollout.py"),
        ],
        S.ROLLOUT_DISPATCH,
    ),
    (
        "abort HEAD",
        [
            ("abort_server_until_idle", "slime/backends/sglang_utils/server_control.py"),
            ("abort_servers_until_idle", "slime/backends/sglang_utils/server_control.py"),
        ],
        S.ROLLOUT_DISPATCH,
    ),
    (
        "convert",
        [
            ("RolloutManager._split_train_data_by_dp", "slime/ray/rollout.py"),
            ("RolloutManager.generate", "slime/ray/rollout.py"),
        ],
        S.ROLLOUT_DISPATCH,
    ),
    # --- rollout offload / onload
    (
        "RM offload",
        [("get", "ray/_private/worker.py"), ("RolloutManager.offload", "slime/ray/rollout.py")],
        S.OFFLOAD_ONLOAD,
    ),
    (
        "engine release",
        [
            ("SGLangEngine._make_request", "slime/backends/sglang_utils/sglang_engine.py"),
            (
                "SGLangEngine.release_memory_occupation",
                "slime/backends/sglang_utils/sglang_engine.py",
            ),
        ],
        S.OFFLOAD_ONLOAD,
    ),
    (
        "engine flush inside release",
        [
            ("SGLangEngine.flush_cache", "slime/backends/sglang_utils/sglang_engine.py"),
            (
                "SGLangEngine.release_memory_occupation",
                "slime/backends/sglang_utils/sglang_engine.py",
            ),
        ],
        S.OFFLOAD_ONLOAD,
    ),
    (
        "HEAD server group onload",
        [
            ("ServerGroup.onload", "slime/ray/rollout.py"),
            ("RolloutServer.onload_weights", "slime/ray/rollout.py"),
        ],
        S.OFFLOAD_ONLOAD,
    ),
    # --- data fetch / wake-sleep / log-prob / train step -> train
    (
        "data fetch",
        [
            ("get", "ray/_private/worker.py"),
            ("process_rollout_data", "slime/utils/data.py"),
            ("MegatronTrainRayActor._get_rollout_data", "slime/backends/megatron_utils/actor.py"),
            ("MegatronTrainRayActor.train", "slime/backends/megatron_utils/actor.py"),
        ],
        S.TRAIN,
    ),
    (
        "wake up",
        [
            ("reload_process_groups", "slime/utils/reloadable_process_group.py"),
            ("MegatronTrainRayActor.wake_up", "slime/backends/megatron_utils/actor.py"),
            ("wrapper", "slime/utils/timer.py"),
        ],
        S.TRAIN,
    ),
    (
        "sleep",
        [
            ("destroy_process_groups", "slime/utils/reloadable_process_group.py"),
            ("MegatronTrainRayActor.sleep", "slime/backends/megatron_utils/actor.py"),
            ("wrapper", "slime/observability/timer.py"),
        ],
        S.TRAIN,
    ),
    (
        "log prob PP",
        [
            ("_communicate_shapes", "megatron/core/pipeline_parallel/p2p_communication.py"),
            ("recv_forward", "megatron/core/pipeline_parallel/p2p_communication.py"),
            (
                "forward_backward_pipelining_without_interleaving",
                "megatron/core/pipeline_parallel/schedules.py",
            ),
            ("forward_only", "slime/backends/megatron_utils/model.py"),
            ("MegatronTrainRayActor.compute_log_prob", "slime/backends/megatron_utils/actor.py"),
        ],
        S.TRAIN,
    ),
    (
        "train step collective",
        [
            ("all_reduce", "torch/distributed/distributed_c10d.py"),
            ("new_function", "slime/utils/reloadable_process_group.py"),
            ("loss_function", "slime/backends/megatron_utils/loss.py"),
            ("train_one_step", "slime/backends/megatron_utils/model.py"),
        ],
        S.TRAIN,
    ),
    (
        "gather log data",
        [
            ("gather_object", "torch/distributed/distributed_c10d.py"),
            ("gather_log_data", "slime/backends/megatron_utils/data.py"),
            ("log_rollout_data", "slime/backends/megatron_utils/data.py"),
        ],
        S.TRAIN,
    ),
    # --- weight sync (colocate)
    (
        "colocate gather",
        [
            ("gather_object", "torch/distributed/distributed_c10d.py"),
            (
                "_send_to_colocated_engine",
                "slime/backends/megatron_utils/update_weight/update_weight_from_tensor.py",
            ),
            (
                "UpdateWeightFromTensor._send_hf_params",
                "slime/backends/megatron_utils/update_weight/update_weight_from_tensor.py",
            ),
            (
                "UpdateWeightFromTensor.update_weights",
                "slime/backends/megatron_utils/update_weight/update_weight_from_tensor.py",
            ),
            ("MegatronTrainRayActor.update_weights", "slime/backends/megatron_utils/actor.py"),
        ],
        S.WEIGHT_SYNC,
    ),
    (
        "bridge export Jan",
        [
            ("export_hf_weights", "megatron/bridge/models/conversion/auto_bridge.py"),
            (
                "HfWeightIteratorBridge.get_hf_weight_chunks",
                "slime/backends/megatron_utils/update_weight/hf_weight_iterator_bridge.py",
            ),
        ],
        S.WEIGHT_SYNC,
    ),
    (
        "reload inside update_weights",
        [
            ("reload_process_groups", "slime/utils/reloadable_process_group.py"),
            ("MegatronTrainRayActor.update_weights", "slime/backends/megatron_utils/actor.py"),
        ],
        S.WEIGHT_SYNC,
    ),
    (
        "engine tensor update",
        [
            ("SGLangEngine._make_request", "slime/backends/sglang_utils/sglang_engine.py"),
            (
                "SGLangEngine.update_weights_from_tensor",
                "slime/backends/sglang_utils/sglang_engine.py",
            ),
        ],
        S.WEIGHT_SYNC,
    ),
    (
        "driver weight sync",
        [
            ("get", "ray/_private/worker.py"),
            ("RayTrainGroup.update_weights", "slime/ray/actor_group.py"),
            ("train", "train.py"),
        ],
        S.WEIGHT_SYNC,
    ),
    # --- weight sync (distributed): group init is weight_sync, the broadcast is nccl_broadcast
    (
        "group init",
        [
            ("rendezvous", "torch/distributed/rendezvous.py"),
            ("init_process_group", "slime/utils/distributed_utils.py"),
            (
                "connect_rollout_engines_from_distributed",
                "slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py",
            ),
            (
                "UpdateWeightFromDistributed.connect_rollout_engines",
                "slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py",
            ),
        ],
        S.WEIGHT_SYNC,
    ),
    (
        "TP gather Jan",
        [
            ("all_gather", "torch/distributed/distributed_c10d.py"),
            ("all_gather_param", "slime/backends/megatron_utils/update_weight/common.py"),
            (
                "UpdateWeightFromDistributed._update_weight_from_distributed",
                "slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py",
            ),
        ],
        S.WEIGHT_SYNC,
    ),
    (
        "EP gather HEAD",
        [
            ("all_gather_object", "torch/distributed/distributed_c10d.py"),
            (
                "UpdateWeightFromDistributed._ep_gather_and_convert",
                "slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py",
            ),
        ],
        S.WEIGHT_SYNC,
    ),
    (
        "barrier of non-source ranks",
        [
            ("barrier", "torch/distributed/distributed_c10d.py"),
            (
                "UpdateWeightFromDistributed.update_weights",
                "slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py",
            ),
        ],
        S.WEIGHT_SYNC,
    ),
    (
        "broadcast",
        [
            ("broadcast", "torch/distributed/distributed_c10d.py"),
            (
                "update_weights_from_distributed",
                "slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py",
            ),
            (
                "UpdateWeightFromDistributed._update_bucket_weights_from_distributed",
                "slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py",
            ),
        ],
        S.NCCL_BROADCAST,
    ),
    (
        "lock spin",
        [
            (
                "UpdateWeightFromDistributed._update_bucket_weights_from_distributed",
                "slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py",
            ),
            (
                "UpdateWeightFromDistributed._send_weights",
                "slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py",
            ),
        ],
        S.NCCL_BROADCAST,
    ),
    (
        "engine actor broadcast",
        [
            ("SGLangEngine._make_request", "slime/backends/sglang_utils/sglang_engine.py"),
            (
                "SGLangEngine.update_weights_from_distributed",
                "slime/backends/sglang_utils/sglang_engine.py",
            ),
        ],
        S.NCCL_BROADCAST,
    ),
    (
        "engine actor group init",
        [
            ("SGLangEngine._make_request", "slime/backends/sglang_utils/sglang_engine.py"),
            (
                "SGLangEngine.init_weights_update_group",
                "slime/backends/sglang_utils/sglang_engine.py",
            ),
        ],
        S.WEIGHT_SYNC,
    ),
    # --- SGLang scheduler (0.5.15, 0.5.21+, 0.5.2)
    (
        "scheduler broadcast 0.5.15",
        [
            ("broadcast", "torch/distributed/distributed_c10d.py"),
            (
                "ModelRunner._update_bucketed_weights_from_distributed",
                "sglang/srt/model_executor/model_runner.py",
            ),
            ("TpModelWorker.update_weights_from_distributed", "sglang/srt/managers/tp_worker.py"),
            (
                "SchedulerWeightUpdater.update_weights_from_distributed",
                "sglang/srt/managers/scheduler_components/weight_updater.py",
            ),
            ("TypeBasedDispatcher.__call__", "sglang/utils.py"),
            ("Scheduler.process_input_requests", "sglang/srt/managers/scheduler.py"),
            ("Scheduler.event_loop_overlap", "sglang/srt/managers/scheduler.py"),
        ],
        S.NCCL_BROADCAST,
    ),
    (
        "scheduler broadcast 0.5.21",
        [
            (
                "WeightUpdater._receive_bucketed_weights_from_distributed",
                "sglang/srt/model_executor/model_runner_components/weight_updater.py",
            )
        ],
        S.NCCL_BROADCAST,
    ),
    (
        "scheduler group init",
        [
            ("_create_c10d_store", "torch/distributed/rendezvous.py"),
            ("init_custom_process_group", "sglang/srt/utils/common.py"),
            ("ModelRunner.init_weights_update_group", "sglang/srt/model_executor/model_runner.py"),
        ],
        S.WEIGHT_SYNC,
    ),
    (
        "scheduler release",
        [
            ("barrier", "torch/distributed/distributed_c10d.py"),
            (
                "SchedulerWeightUpdater.release_memory_occupation",
                "sglang/srt/managers/scheduler_components/weight_updater.py",
            ),
        ],
        S.OFFLOAD_ONLOAD,
    ),
    (
        "scheduler IPC update",
        [
            (
                "SchedulerWeightUpdater.update_weights_from_tensor",
                "sglang/srt/managers/scheduler_update_weights_mixin.py",
            )
        ],
        S.WEIGHT_SYNC,
    ),
    (
        "scheduler batch",
        [
            ("synchronize", "torch/cuda/streams.py"),
            (
                "Scheduler.process_batch_result_decode",
                "sglang/srt/managers/scheduler_output_processor_mixin.py",
            ),
            ("Scheduler.event_loop_overlap", "sglang/srt/managers/scheduler.py"),
        ],
        S.ROLLOUT_DISPATCH,
    ),
    # --- eval
    (
        "eval main",
        [
            ("result", "concurrent/futures/_base.py"),
            ("run", "slime/utils/async_utils.py"),
            ("generate_rollout", "slime/rollout/sglang_rollout.py"),
            ("call_rollout_fn", "slime/rollout/base_types.py"),
            ("RolloutManager.eval", "slime/ray/rollout.py"),
        ],
        S.EVAL,
    ),
    (
        "eval loop",
        [
            ("generate_and_rm", "slime/rollout/sglang_rollout.py"),
            ("eval_rollout_single_dataset", "slime/rollout/sglang_rollout.py"),
        ],
        S.EVAL,
    ),
    # --- checkpoint save / load
    (
        # slime#1908, py-spy of every train rank as the report printed it (Megatron paths relative
        # to its megatron/ folder), innermost first
        "save in dist_checkpointing async plan (slime#1908)",
        [
            ("gather", "torch/distributed/distributed_c10d.py"),
            ("wrapper", "torch/distributed/c10d_logger.py"),
            ("gather_object", "torch/distributed/distributed_c10d.py"),
            ("wrapper", "torch/distributed/c10d_logger.py"),
            ("gather_object", "torch/distributed/checkpoint/utils.py"),
            (
                "save_state_dict_async_plan",
                "core/dist_checkpointing/strategies/state_dict_saver.py",
            ),
            ("async_save", "core/dist_checkpointing/strategies/torch.py"),
            ("save", "core/dist_checkpointing/strategies/base.py"),
            ("save", "core/dist_checkpointing/strategies/fully_parallel.py"),
            ("save", "core/dist_checkpointing/serialization.py"),
            ("save_checkpoint", "training/checkpointing.py"),
            ("save", "slime/backends/megatron_utils/model.py"),
            ("save_model", "slime/backends/megatron_utils/actor.py"),
            ("wrapper", "slime/utils/timer.py"),
        ],
        S.CHECKPOINT,
    ),
    (
        "HEAD save_model finalising an async save",
        [
            (
                "AsyncCallsQueue.maybe_finalize_async_calls",
                "megatron/core/dist_checkpointing/strategies/async_utils.py",
            ),
            ("maybe_finalize_async_save", "megatron/training/async_utils.py"),
            ("MegatronTrainRayActor.save_model", "slime/backends/megatron_utils/actor.py"),
            ("timer.<locals>.wrapper", "slime/observability/timer.py"),
        ],
        S.CHECKPOINT,
    ),
    (
        "torch DCP file write",
        [
            ("_write_item", "torch/distributed/checkpoint/filesystem.py"),
            ("_write_files_from_queue", "torch/distributed/checkpoint/filesystem.py"),
            ("save_model", "my_trainer.py"),
        ],
        S.CHECKPOINT,
    ),
    (
        "checkpoint load at startup",
        [
            ("load", "core/dist_checkpointing/serialization.py"),
            ("load_checkpoint", "training/checkpointing.py"),
            ("load_checkpoint", "slime/backends/megatron_utils/checkpoint.py"),
            ("initialize_model_and_optimizer", "slime/backends/megatron_utils/model.py"),
            ("MegatronTrainRayActor.init", "slime/backends/megatron_utils/actor.py"),
        ],
        S.CHECKPOINT,
    ),
    (
        "driver save_model",
        [
            ("get", "ray/_private/worker.py"),
            ("RayTrainGroup.save_model", "slime/ray/actor_group.py"),
            ("train", "train.py"),
        ],
        S.CHECKPOINT,
    ),
    (
        "driver save Jan",
        [
            ("get", "ray/_private/worker.py"),
            ("train.<locals>.save", "train.py"),
            ("train", "train.py"),
        ],
        S.CHECKPOINT,
    ),
    (
        "rollout manager data-source save",
        [
            ("save", "torch/serialization.py"),
            ("RolloutDataSource.save", "slime/rollout/data_source.py"),
            ("RolloutManager.save", "slime/ray/rollout.py"),
        ],
        S.CHECKPOINT,
    ),
    # --- FT recovery -> startup
    (
        "FT recover Jan",
        [
            ("get", "ray/_private/worker.py"),
            ("init_rollout_engines", "slime/ray/rollout.py"),
            ("RolloutManager.recover_rollout_engines", "slime/ray/rollout.py"),
        ],
        S.STARTUP,
    ),
    (
        "FT recover HEAD",
        [
            ("get", "ray/_private/worker.py"),
            ("RolloutServer.recover", "slime/ray/rollout.py"),
            ("RolloutManager.recover_updatable_engines", "slime/ray/rollout.py"),
        ],
        S.STARTUP,
    ),
]


@pytest.mark.parametrize(("label", "frames", "stage"), CASES, ids=[c[0] for c in CASES])
def test_stack_maps_to_its_stage(label: str, frames: list[tuple[str, str]], stage: Stage) -> None:
    stack = tuple(F(n, f) for n, f in frames) + RAY_ACTOR_TAIL
    found, index, sig = find_stage(stack)
    assert found is stage, (label, sig)
    assert index is not None


def test_qualified_method_matches_in_a_copied_file() -> None:
    """A slime method in a file the tables do not expect (a fork, a reproducer) still matches by
    its class-qualified name (py-spy on Python >= 3.11)."""
    stack = (F("MegatronTrainRayActor.update_weights", "driver.py"),)
    assert find_stage(stack)[0] is S.WEIGHT_SYNC
    assert find_stage((F("update_weights", "driver.py"),))[0] is None


def test_the_innermost_matching_frame_decides_not_the_top_frame() -> None:
    stack = (
        F("synchronize", "torch/cuda/__init__.py"),
        F("update_weights_from_distributed", "nccl_hang.py"),
        F("main", "nccl_hang.py"),
    )
    stage, index, _ = find_stage(stack)
    assert (stage, index) == (S.NCCL_BROADCAST, 1)


def test_generic_rows_yield_to_an_outer_specific_frame() -> None:
    inner_generic = (F("forward_step", "megatron/core/pipeline_parallel/schedules.py"),)
    assert find_stage(inner_generic)[0] is S.TRAIN
    under_bridge = inner_generic + (
        F(
            "HfWeightIteratorBridge.get_hf_weight_chunks",
            "slime/backends/megatron_utils/update_weight/hf_weight_iterator_bridge.py",
        ),
    )
    assert find_stage(under_bridge)[0] is S.WEIGHT_SYNC


def test_unrelated_frames_have_no_stage() -> None:
    assert find_stage((F("never_join", "nccl_hang.py"), F("<module>", "nccl_hang.py")))[0] is None
    assert sg.match_frame(N("cudaDeviceSynchronize", "libcudart.so")) is None


def test_layout_specific_rows_belong_to_their_layout() -> None:
    jan = sg.match_frame(F("init_rollout_engines", "slime/ray/rollout.py"))
    head = sg.match_frame(F("start_rollout_servers", "slime/ray/rollout.py"))
    assert jan is not None and sg.layouts_of(jan) == ("2026-01",)
    assert head is not None and sg.layouts_of(head) == ("2026-08",)
    assert sg.layout_hint(F("wrapper", "slime/utils/timer.py")) == "2026-01"
    assert sg.layout_hint(F("wrapper", "slime/observability/timer.py")) == "2026-08"


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
    assert sig is not None and sig.stage is S.NCCL_BROADCAST
    assert sg.method_stage("RolloutManager", "no_such_method") is None
    for cls, method in (("MegatronTrainRayActor", "save_model"), ("RolloutManager", "save")):
        sig = sg.method_stage(cls, method)
        assert sig is not None and sig.stage is S.CHECKPOINT


WAITS = [
    (
        [
            F("broadcast", "torch/distributed/distributed_c10d.py", 3151),
            F("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83),
            F("train_step", "gloo_hang.py"),
        ],
        False,
        sg.Block.COLLECTIVE,
        0,
    ),
    (
        [
            N("pthread_cond_wait"),
            N("c10d::Work::wait", "libtorch_cpu.so"),
            F("broadcast", "torch/distributed/distributed_c10d.py"),
        ],
        False,
        sg.Block.COLLECTIVE,
        1,
    ),
    (
        [F("synchronize", "torch/cuda/__init__.py"), F("train_one_step", "x.py")],
        True,
        sg.Block.CUDA_SYNC,
        0,
    ),
    (
        [
            F("Worker.get_objects", "ray/_private/worker.py"),
            F("get", "ray/_private/worker.py"),
            F("train", "train.py"),
        ],
        False,
        sg.Block.RAY_GET,
        0,
    ),
    (
        [
            F("readinto", "socket.py"),
            F("_read_status", "http/client.py"),
            F("send", "requests/adapters.py"),
            F("SGLangEngine._make_request", "slime/backends/sglang_utils/sglang_engine.py"),
        ],
        False,
        sg.Block.HTTP,
        0,
    ),
    (
        [
            F("select", "selectors.py"),
            F("BaseEventLoop._run_once", "asyncio/base_events.py"),
            F("AsyncLoopThread._start_loop", "slime/utils/async_utils.py"),
        ],
        False,
        sg.Block.EVENT_LOOP,
        0,
    ),
    (
        [F("Condition.wait", "threading.py"), F("Future.result", "concurrent/futures/_base.py")],
        False,
        sg.Block.WAIT,
        0,
    ),
    (
        [
            F("rendezvous", "torch/distributed/rendezvous.py"),
            F("init_process_group", "slime/utils/distributed_utils.py"),
        ],
        False,
        sg.Block.RENDEZVOUS,
        0,
    ),
    (
        [
            F("Worker.main_loop", "ray/_private/worker.py"),
            F("<module>", "ray/_private/workers/default_worker.py"),
        ],
        False,
        sg.Block.IDLE_WORKER,
        0,
    ),
    ([F("never_join", "nccl_hang.py")], False, sg.Block.PARKED, 0),
    ([F("busy", "user.py")], True, sg.Block.CPU, 0),
    # library code running under an event loop is work, not a wait
    (
        [
            F("Basic.__new__", "sympy/core/basic.py"),
            F("Handle._run", "asyncio/events.py"),
            F("BaseEventLoop._run_once", "asyncio/base_events.py"),
        ],
        True,
        sg.Block.CPU,
        0,
    ),
    (
        [
            N("clock_nanosleep"),
            F("_wait_server_healthy", "slime/backends/sglang_utils/sglang_engine.py"),
        ],
        False,
        sg.Block.SLEEP,
        0,
    ),
]


@pytest.mark.parametrize(("frames", "active", "block", "index"), WAITS)
def test_what_a_thread_is_blocked_on(
    frames: list[Frame],
    active: bool,
    block: sg.Block,
    index: int,
) -> None:
    assert find_block(tuple(frames), active) == (block, index)

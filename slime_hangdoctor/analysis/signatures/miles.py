"""miles's rows (`miles-2026-08` = radixark/miles 31f1ca961): slime's rows for the files miles
keeps in place, renamed, plus miles's own for the files it moved."""

from __future__ import annotations

from dataclasses import replace

from slime_hangdoctor.analysis.signatures.common import ANY, FrameSig, MethodSig, methods, rows
from slime_hangdoctor.analysis.signatures.slime import (
    UPDATE_FROM_DISTRIBUTED_PY,
    UPDATE_WEIGHT_DIR,
)
from slime_hangdoctor.verdict import Stage

# radixark/miles @ 31f1ca961 keeps slime's classes under `miles/`. Where a file kept its place
# (`slime/X` -> `miles/X`), the row is slime's, renamed by `in_miles`; the files miles moved or
# dropped are left out (_NOT_IN_MILES) and the moved ones have their own rows (MILES_FRAMES).
_NOT_IN_MILES = (
    "slime/ray/",  # split into miles/ray/rollout/*.py and miles/ray/train/ (rows below)
    "slime/backends/megatron_utils/loss.py",  # no loss.py, data.py, cp_utils.py in miles
    "slime/backends/megatron_utils/data.py",
    "slime/backends/megatron_utils/cp_utils.py",
    "slime/backends/megatron_utils/hf_checkpoint_saver.py",  # miles: hf_export.py
    UPDATE_FROM_DISTRIBUTED_PY,  # miles: update_weight_from_distributed/ (a package)
    UPDATE_WEIGHT_DIR + "update_weight_from_disk.py",
    UPDATE_WEIGHT_DIR + "update_weight_from_disk_delta.py",
    "slime/backends/sglang_utils/server_control.py",
)
# slime rows naming a function miles does not have in the same file
_NOT_IN_MILES_FUNCS = frozenset(
    {
        ("MegatronTrainRayActor", "_get_rollout_data"),
        ("MegatronTrainRayActor", "fill_routing_replay"),
        ("SGLangEngine", "_register_to_router"),
        ("SGLangEngine", "post_process_weights"),
    }
)


def in_miles(sigs: tuple[FrameSig, ...]) -> tuple[FrameSig, ...]:
    """slime's rows for the files miles keeps in place, `slime/` renamed `miles/`; rows on other
    trees (Megatron, SGLang, torch, sympy...) as they are."""
    out: list[FrameSig] = []
    for sig in sigs:
        if sig.file is None or not sig.file.startswith("slime/"):
            out.append(sig)
        elif not sig.file.startswith(_NOT_IN_MILES) and (sig.cls, sig.func) not in (
            _NOT_IN_MILES_FUNCS
        ):
            out.append(replace(sig, file="miles/" + sig.file.removeprefix("slime/")))
    return tuple(out)


_MR = "miles/ray/rollout/"
_M_RM = _MR + "rollout_manager.py"
_M_ENGINE = "miles/backends/sglang_utils/sglang_engine.py"
_M_GROUP = "miles/ray/train/group.py"
_M_FSDP = "miles/backends/fsdp_utils/actor.py"

# Each row: file:line at radixark/miles@31f1ca961a94.
MILES_FRAMES: tuple[FrameSig, ...] = (
    # miles/ray/placement_group.py:51, :108, :126, :187
    *rows(
        Stage.STARTUP,
        "miles/ray/placement_group.py",
        "create_placement_groups _create_placement_group create_rollout_manager "
        "allocate_train_group",
        what="driver startup (placement group, actors)",
    ),
    # RolloutManager, rollout_manager.py:57 __init__, :144 generate, :171 eval,
    # :206 _eval_checkpoint, :243 _get_rollout_data, :275 save, :280 load, :286-298 offload /
    # onload / onload_weights / onload_kv, :303 get_updatable_engines_and_lock, :324
    # clear_updatable_has_new_engines, :330 recover_updatable_engines, :375 check_weights,
    # :394 set_train_parallel_config
    FrameSig("__init__", Stage.STARTUP, _M_RM, "RolloutManager", "rollout manager startup"),
    *rows(Stage.ROLLOUT_DISPATCH, _M_RM, "generate _get_rollout_data", cls="RolloutManager"),
    *rows(Stage.EVAL, _M_RM, "eval _eval_checkpoint", cls="RolloutManager", what="eval rollout"),
    *rows(Stage.CHECKPOINT, _M_RM, "save load", cls="RolloutManager"),
    *rows(
        Stage.OFFLOAD_ONLOAD,
        _M_RM,
        "offload onload onload_weights onload_kv",
        cls="RolloutManager",
        what="engine offload/onload",
    ),
    *rows(
        Stage.WEIGHT_SYNC,
        _M_RM,
        "get_updatable_engines_and_lock clear_updatable_has_new_engines check_weights",
        cls="RolloutManager",
    ),
    *rows(
        Stage.STARTUP,
        _M_RM,
        "recover_updatable_engines set_train_parallel_config",
        cls="RolloutManager",
    ),
    # router_manager.py:18 start_router (slime's _start_router)
    FrameSig("start_router", Stage.STARTUP, _MR + "router_manager.py", what="router launch"),
    # rollout_server.py:17 start_rollout_servers, RolloutServer :263 recover, :268 offload,
    # :274 onload, :292 wait_all_engines_alive
    FrameSig("start_rollout_servers", Stage.STARTUP, _MR + "rollout_server.py", what="engines"),
    *rows(
        Stage.STARTUP,
        _MR + "rollout_server.py",
        "recover wait_all_engines_alive",
        cls="RolloutServer",
        what="engine startup / recovery",
    ),
    *rows(Stage.OFFLOAD_ONLOAD, _MR + "rollout_server.py", "offload onload", cls="RolloutServer"),
    # server_group.py:58 start_engines, :235 offload, :244 onload, :253 onload_weights_from_disk
    FrameSig("start_engines", Stage.STARTUP, _MR + "server_group.py", "ServerGroup", "engines"),
    *rows(
        Stage.OFFLOAD_ONLOAD,
        _MR + "server_group.py",
        "offload onload onload_weights_from_disk",
        cls="ServerGroup",
    ),
    # train_data_conversion.py:50 convert_samples_to_train_data, :274 split_train_data_by_dp
    *rows(
        Stage.ROLLOUT_DISPATCH,
        _MR + "train_data_conversion.py",
        "convert_samples_to_train_data split_train_data_by_dp",
        what="rollout data conversion",
    ),
    # RayTrainGroup, miles/ray/train/group.py:135 train, :229 init, :247 save_model,
    # :255 update_weights, :284 onload, :290 offload, :296 clear_memory, :300 set_rollout_manager
    FrameSig("train", Stage.TRAIN, _M_GROUP, "RayTrainGroup", "driver: train step"),
    *rows(Stage.STARTUP, _M_GROUP, "init set_rollout_manager", cls="RayTrainGroup"),
    FrameSig("save_model", Stage.CHECKPOINT, _M_GROUP, "RayTrainGroup", "driver: checkpoint save"),
    FrameSig("update_weights", Stage.WEIGHT_SYNC, _M_GROUP, "RayTrainGroup", "driver: weight sync"),
    *rows(Stage.OFFLOAD_ONLOAD, _M_GROUP, "onload offload clear_memory", cls="RayTrainGroup"),
    # TrainRayActor, miles/ray/train_actor.py:79 init
    FrameSig(
        "init", Stage.STARTUP, "miles/ray/train_actor.py", "TrainRayActor", "train actor init"
    ),
    # FSDPTrainRayActor, miles/backends/fsdp_utils/actor.py:63 init, :321 sleep, :335 wake_up,
    # :345 save_model, :439 train, :475 _train_core, :589 _train_step, :608 update_weights. Pinned
    # to miles's file, not to the class: a class row would match anywhere; slime's own FSDP
    # backend (9bfe152 slime/backends/fsdp_utils/) has its rows in slime.py, pinned to its file.
    FrameSig("init", Stage.STARTUP, _M_FSDP, what="train actor init"),
    *rows(Stage.TRAIN, _M_FSDP, "train _train_core _train_step sleep wake_up", what="train step"),
    FrameSig("save_model", Stage.CHECKPOINT, _M_FSDP, what="checkpoint save"),
    FrameSig("update_weights", Stage.WEIGHT_SYNC, _M_FSDP, what="weight sync"),
    # miles/backends/fsdp_utils/update_weight_utils.py (UpdateWeight :54 and its subclasses)
    FrameSig(
        ANY,
        Stage.WEIGHT_SYNC,
        "miles/backends/fsdp_utils/update_weight_utils.py",
        what="weight sync",
    ),
    FrameSig(
        ANY, Stage.CHECKPOINT, "miles/backends/fsdp_utils/checkpoint.py", what="FSDP checkpoint"
    ),
    # SGLangEngine's weight-update session and LoRA calls (sglang_engine.py:636 begin_weight_update,
    # :640 end_weight_update, :644 update_weight_version, :370 load_lora_adapter_from_tensors, :510
    # unload_lora_adapter, :413 load_lora_adapter_from_distributed; each a `_make_request` POST with
    # no timeout, :271-292). Every weight-update path opens and closes the session:
    # update_weight/common.py:411,427 (from update_weight_from_tensor.py:260,319 and
    # update_weight_from_distributed/mixin.py:318,330), the FSDP path's update_weight_utils.py:77,
    # 107; mixin.py:326 sets the version before the close; the adapters load in the update
    # (update_weight_from_tensor.py:510,524, mixin.py:263) and the distributed one receives the
    # adapter's broadcast (update_weight_from_distributed/broadcast.py:143,178).
    *rows(
        Stage.WEIGHT_SYNC,
        _M_ENGINE,
        "begin_weight_update end_weight_update update_weight_version "
        "load_lora_adapter_from_tensors unload_lora_adapter",
        cls="SGLangEngine",
        what="engine weight update",
    ),
    FrameSig(
        "load_lora_adapter_from_distributed",
        Stage.NCCL_BROADCAST,
        _M_ENGINE,
        "SGLangEngine",
        "engine receiving the adapter broadcast",
    ),
    # miles/backends/megatron_utils/update_weight/update_weight_from_distributed/ (a package)
    FrameSig(
        ANY,
        Stage.WEIGHT_SYNC,
        "miles/backends/megatron_utils/update_weight/update_weight_from_distributed/",
        what="distributed weight sync",
    ),
)

# rollout_manager.py:303, :324, :330 at 31f1ca961 (FSDPTrainRayActor's methods are slime.py's
# JAN_METHODS: Ray titles them alike in slime's FSDP backend and in miles's)
MILES_METHODS: tuple[MethodSig, ...] = (
    *methods(
        "RolloutManager",
        Stage.WEIGHT_SYNC,
        "get_updatable_engines_and_lock clear_updatable_has_new_engines",
    ),
    *methods("RolloutManager", Stage.STARTUP, "recover_updatable_engines"),
    # SGLangEngine (sglang_engine.py:636, :640, :644, :370, :510, :413 at 31f1ca961; the callers
    # are in the frame rows above)
    *methods(
        "SGLangEngine",
        Stage.WEIGHT_SYNC,
        "begin_weight_update end_weight_update update_weight_version "
        "load_lora_adapter_from_tensors unload_lora_adapter",
    ),
    *methods("SGLangEngine", Stage.NCCL_BROADCAST, "load_lora_adapter_from_distributed"),
    # MultiLoRAController (miles/ray/multi_lora/controller.py:60): created and started by the
    # driver (train_multi_lora_async.py:46-47; start :67); record_weight_update (:88) is called
    # once a weight push landed (multi_lora_utils.py:489, commit_weight_push). Its other methods
    # are registry reads and writes of an async actor, answered at once: no stage of their own.
    *methods("MultiLoRAController", Stage.STARTUP, "__init__ start"),
    *methods("MultiLoRAController", Stage.WEIGHT_SYNC, "record_weight_update"),
)

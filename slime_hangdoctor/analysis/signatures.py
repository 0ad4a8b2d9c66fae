"""Stage and wait signatures: DATA tables that map stack frames and Ray methods onto a stage.

One `Layout` per slime source layout (`2026-01` = commit 9bfe152, `2026-08` = commit 624b824, see
docs slime.md; `miles-2026-08` = radixark/miles 31f1ca961; `slime-next` = the rows slime's open
ServingCluster work adds, THUDM/slime 15b8e507). A new slime release is a new `Layout` entry (or a
few rows in an existing one): no code change. Matching is order-independent: when several rows
match one frame, the most specific row wins (exact function name beats a wildcard, a class
qualifier and an exact file beat a folder).

A row marked `generic` is shared by several stages (e.g. `generate_rollout` runs for rollout and for
eval, megatron core runs in training and in weight export): it decides the stage only when no outer
frame matches a non-generic row.

`WAITS` tells what a thread is blocked on, from library frames (torch.distributed, ray.get, requests,
selectors, ...) and, when py-spy ran with --native, native frames (cudaDeviceSynchronize, c10d::Work::wait).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from functools import lru_cache

from slime_hangdoctor.facts import Frame
from slime_hangdoctor.verdict import Stage

ANY = "*"


@dataclass(frozen=True)
class FrameSig:
    """One stack frame shape that places a process in a stage.

    `file`: a path suffix (`slime/ray/rollout.py`) or a folder ending in `/` (`sglang/srt/`); None: any
    file (only for distinctive function names). `cls`: the class, matched against the qualified name
    py-spy prints on Python >= 3.11 (`MegatronTrainRayActor.update_weights`).
    """

    func: str
    stage: Stage
    file: str | None = None
    cls: str | None = None
    what: str = ""
    generic: bool = False

    @property
    def specificity(self) -> tuple[int, int]:
        """(what is pinned, how long the file pattern is): a deeper folder is more specific."""
        score = 0
        if self.func != ANY:
            score += 8
        if self.cls is not None:
            score += 4
        if self.file is not None:
            score += 1 if self.file.endswith("/") else 2
        return score, len(self.file or "")


@dataclass(frozen=True)
class MethodSig:
    """A Ray actor method (process title `ray::Class.method`, running task `Class.method`)."""

    cls: str
    method: str
    stage: Stage
    what: str = ""


@dataclass(frozen=True)
class Layout:
    name: str
    frames: tuple[FrameSig, ...]
    methods: tuple[MethodSig, ...]
    source: str = ""  # the tree its rows were read from (`owner/repo@commit`)


# --------------------------------------------------------------------------- frame tables

_ROLLOUT_PY = "slime/ray/rollout.py"
_ACTOR_PY = "slime/backends/megatron_utils/actor.py"
_TRAIN_ACTOR_PY = "slime/ray/train_actor.py"
_ENGINE_PY = "slime/backends/sglang_utils/sglang_engine.py"
_UPDATE_WEIGHT_DIR = "slime/backends/megatron_utils/update_weight/"
_UPDATE_FROM_DISTRIBUTED_PY = _UPDATE_WEIGHT_DIR + "update_weight_from_distributed.py"
_UPDATE_FROM_TENSOR_PY = _UPDATE_WEIGHT_DIR + "update_weight_from_tensor.py"
_ACTOR_GROUP = "slime/ray/actor_group.py"
_PLACEMENT_GROUP_PY = "slime/ray/placement_group.py"
_SGLANG = "sglang/srt/"


def _rows(
    stage: Stage, file: str | None, funcs: str, *, cls: str | None = None, what: str = ""
) -> tuple[FrameSig, ...]:
    """Several functions of one file (and class) with one stage. `funcs` is space-separated."""
    return tuple(
        FrameSig(func=f, stage=stage, file=file, cls=cls, what=what) for f in funcs.split()
    )


_COMMON_FRAMES: tuple[FrameSig, ...] = (
    # --- driver: startup and the per-step calls into actor groups
    *_rows(
        Stage.STARTUP,
        _PLACEMENT_GROUP_PY,
        "create_placement_groups _create_placement_group create_rollout_manager "
        "create_training_models allocate_train_group",
        what="driver startup (placement group, actors)",
    ),
    FrameSig(
        "update_weights", Stage.WEIGHT_SYNC, _ACTOR_GROUP, "RayTrainGroup", "driver: weight sync"
    ),
    FrameSig("async_train", Stage.TRAIN, _ACTOR_GROUP, "RayTrainGroup", "driver: train step"),
    FrameSig(
        "save_model", Stage.CHECKPOINT, _ACTOR_GROUP, "RayTrainGroup", "driver: checkpoint save"
    ),
    *_rows(Stage.OFFLOAD_ONLOAD, _ACTOR_GROUP, "onload offload clear_memory", cls="RayTrainGroup"),
    FrameSig("set_rollout_manager", Stage.STARTUP, _ACTOR_GROUP, "RayTrainGroup"),
    FrameSig(
        "offload_train", Stage.OFFLOAD_ONLOAD, "train.py", what="driver: offload train actors"
    ),
    # --- RolloutManager (slime/ray/rollout.py)
    FrameSig("__init__", Stage.STARTUP, _ROLLOUT_PY, "RolloutManager", "rollout manager startup"),
    FrameSig("_start_router", Stage.STARTUP, _ROLLOUT_PY, what="router launch"),
    FrameSig(
        "_allocate_rollout_engine_addr_and_ports_normal", Stage.STARTUP, _ROLLOUT_PY, what="engines"
    ),
    FrameSig("generate", Stage.ROLLOUT_DISPATCH, _ROLLOUT_PY, "RolloutManager", "rollout generate"),
    FrameSig("_get_rollout_data", Stage.ROLLOUT_DISPATCH, _ROLLOUT_PY, "RolloutManager"),
    FrameSig("eval", Stage.EVAL, _ROLLOUT_PY, "RolloutManager", "eval rollout"),
    *_rows(
        Stage.ROLLOUT_DISPATCH,
        _ROLLOUT_PY,
        "_convert_samples_to_train_data _split_train_data_by_dp _post_process_rewards",
        cls="RolloutManager",
        what="rollout data conversion",
    ),
    *_rows(
        Stage.OFFLOAD_ONLOAD,
        _ROLLOUT_PY,
        "offload onload onload_weights onload_kv",
        cls="RolloutManager",
        what="engine offload/onload",
    ),
    FrameSig("set_train_parallel_config", Stage.STARTUP, _ROLLOUT_PY, "RolloutManager"),
    *_rows(
        Stage.CHECKPOINT,
        _ROLLOUT_PY,
        "save load",
        cls="RolloutManager",
        what="rollout manager saving / loading its data-source state",
    ),
    FrameSig("check_weights", Stage.WEIGHT_SYNC, _ROLLOUT_PY, "RolloutManager"),
    # --- rollout functions (the RolloutManager's asyncio loop thread and main thread)
    FrameSig(
        "generate_rollout", Stage.ROLLOUT_DISPATCH, "slime/rollout/", what="rollout", generic=True
    ),
    FrameSig(
        "call_rollout_fn", Stage.ROLLOUT_DISPATCH, "slime/rollout/base_types.py", generic=True
    ),
    *_rows(
        Stage.EVAL,
        "slime/rollout/sglang_rollout.py",
        "eval_rollout eval_rollout_single_dataset",
        what="eval rollout",
    ),
    FrameSig("abort", Stage.ROLLOUT_DISPATCH, "slime/rollout/sglang_rollout.py", what="abort tail"),
    *(
        FrameSig(f, Stage.ROLLOUT_DISPATCH, "slime/rollout/sglang_rollout.py", generic=True)
        for f in ("generate_rollout_async", "generate_and_rm", "generate_and_rm_group", "generate")
    ),
    FrameSig(ANY, Stage.ROLLOUT_DISPATCH, "slime/rollout/", what="rollout function", generic=True),
    *(
        FrameSig(f, Stage.ROLLOUT_DISPATCH, "slime/utils/http_utils.py", generic=True)
        for f in ("post", "_post", "get")
    ),
    # --- reward (runs on the loop thread, synchronously for rule-based RMs)
    FrameSig(ANY, Stage.REWARD, "slime/rollout/rm_hub/", what="reward model"),
    FrameSig(ANY, Stage.REWARD, "sympy/", what="sympy (math reward)"),
    FrameSig(ANY, Stage.REWARD, "math_verify/", what="math_verify (reward)"),
    # math_verify parses LaTeX with latex2sympy2_extended (a package); the older latex2sympy2 is
    # one module file
    FrameSig(ANY, Stage.REWARD, "latex2sympy2_extended/", what="latex2sympy (reward)"),
    FrameSig(ANY, Stage.REWARD, "latex2sympy2.py", what="latex2sympy (reward)"),
    # --- train actors (MegatronTrainRayActor)
    FrameSig("init", Stage.STARTUP, _ACTOR_PY, "MegatronTrainRayActor", "train actor init"),
    FrameSig("init", Stage.STARTUP, _TRAIN_ACTOR_PY, "TrainRayActor", "train actor init"),
    FrameSig("load_other_checkpoint", Stage.STARTUP, _ACTOR_PY, "MegatronTrainRayActor"),
    *_rows(
        Stage.TRAIN,
        _ACTOR_PY,
        "train train_actor train_critic compute_log_prob _get_rollout_data "
        "fill_routing_replay sleep wake_up",
        cls="MegatronTrainRayActor",
        what="train step",
    ),
    FrameSig("clear_memory", Stage.TRAIN, _TRAIN_ACTOR_PY, "TrainRayActor"),
    FrameSig(
        "update_weights", Stage.WEIGHT_SYNC, _ACTOR_PY, "MegatronTrainRayActor", "weight sync"
    ),
    FrameSig("process_rollout_data", Stage.TRAIN, None, what="trainer fetching rollout data"),
    *_rows(
        Stage.TRAIN,
        "slime/backends/megatron_utils/model.py",
        "train train_one_step forward_only",
        what="train step",
    ),
    FrameSig("train_one_step", Stage.TRAIN, None, what="train step"),
    *_rows(
        Stage.STARTUP,
        "slime/backends/megatron_utils/model.py",
        "initialize_model_and_optimizer setup_model_and_optimizer",
        what="model init",
    ),
    FrameSig(
        ANY, Stage.STARTUP, "slime/backends/megatron_utils/initialize.py", what="megatron init"
    ),
    FrameSig(ANY, Stage.TRAIN, "slime/backends/megatron_utils/loss.py", what="loss"),
    FrameSig(ANY, Stage.TRAIN, "slime/backends/megatron_utils/data.py", what="train data"),
    FrameSig(
        ANY, Stage.TRAIN, "slime/backends/megatron_utils/cp_utils.py", what="context parallel"
    ),
    FrameSig(ANY, Stage.TRAIN, "megatron/core/pipeline_parallel/", what="megatron", generic=True),
    FrameSig(ANY, Stage.TRAIN, "megatron/core/optimizer/", what="optimizer", generic=True),
    FrameSig(ANY, Stage.TRAIN, "megatron/core/distributed/", what="megatron DDP", generic=True),
    FrameSig(ANY, Stage.STARTUP, "megatron/training/initialize.py", what="megatron init"),
    FrameSig(
        "initialize_model_parallel", Stage.STARTUP, "megatron/core/parallel_state.py", generic=True
    ),
    FrameSig(
        "distributed_masked_whiten", Stage.TRAIN, "slime/utils/distributed_utils.py", what="whiten"
    ),
    FrameSig("init_gloo_group", Stage.STARTUP, "slime/utils/distributed_utils.py"),
    *(
        FrameSig(f, Stage.TRAIN, "slime/utils/reloadable_process_group.py", generic=True)
        for f in ("reload_process_groups", "destroy_process_groups")
    ),
    # --- checkpoint save / load (slime#1908, verl#2238): slime's own entry points, Megatron's
    # save_checkpoint / load_checkpoint, dist_checkpointing with its (async) save strategies, torch DCP.
    # py-spy may print Megatron paths relative to the megatron/ folder (`core/dist_checkpointing/...`,
    # `training/checkpointing.py`, as in slime#1908), so the patterns leave out the leading `megatron/`.
    FrameSig("save_model", Stage.CHECKPOINT, _ACTOR_PY, "MegatronTrainRayActor", "checkpoint save"),
    FrameSig(
        "save", Stage.CHECKPOINT, "slime/backends/megatron_utils/model.py", what="checkpoint save"
    ),
    FrameSig(
        ANY, Stage.CHECKPOINT, "slime/backends/megatron_utils/checkpoint.py", what="checkpoint load"
    ),
    *_rows(Stage.CHECKPOINT, "slime/rollout/data_source.py", "save load", what="data-source state"),
    FrameSig(ANY, Stage.CHECKPOINT, "training/checkpointing.py", what="Megatron checkpointing"),
    *_rows(
        Stage.CHECKPOINT,
        "training/async_utils.py",
        "maybe_finalize_async_save schedule_async_save",
        what="Megatron async checkpoint save",
    ),
    FrameSig(ANY, Stage.CHECKPOINT, "dist_checkpointing/", what="Megatron dist_checkpointing"),
    FrameSig(
        ANY, Stage.CHECKPOINT, "torch/distributed/checkpoint/", what="torch distributed checkpoint"
    ),
    # --- weight sync, trainer side
    FrameSig(ANY, Stage.WEIGHT_SYNC, _UPDATE_WEIGHT_DIR, what="weight sync"),
    FrameSig(
        ANY, Stage.WEIGHT_SYNC, _UPDATE_FROM_TENSOR_PY, what="colocated weight sync (CUDA IPC)"
    ),
    FrameSig(ANY, Stage.WEIGHT_SYNC, _UPDATE_FROM_DISTRIBUTED_PY, what="distributed weight sync"),
    # HfWeightIteratorDirect runs under every weight sync that converts to HF (through
    # hf_weight_iterator_base.py:10 at 624b824) and, in slime main, under the HF save too
    # (hf_checkpoint_saver.py:106): the outer frame decides (9bfe152 and 624b824 both have it)
    FrameSig(
        ANY,
        Stage.WEIGHT_SYNC,
        _UPDATE_WEIGHT_DIR + "hf_weight_iterator_direct.py",
        what="HF export",
        generic=True,
    ),
    FrameSig(
        "_update_bucket_weights_from_distributed",
        Stage.NCCL_BROADCAST,
        _UPDATE_FROM_DISTRIBUTED_PY,
        what="weight broadcast (holding / waiting for the engine Lock)",
    ),
    FrameSig(
        "update_weights_from_distributed",
        Stage.NCCL_BROADCAST,
        None,
        what="NCCL broadcast of weights to the engines",
    ),
    FrameSig(
        "init_process_group",
        Stage.WEIGHT_SYNC,
        "slime/utils/distributed_utils.py",
        what="weight-update group creation",
    ),
    FrameSig(
        ANY, Stage.WEIGHT_SYNC, "megatron/bridge/", what="megatron-bridge export", generic=True
    ),
    *_rows(Stage.NCCL_BROADCAST, "slime/ray/utils.py", "acquire release", cls="Lock"),
    # --- SGLangEngine Ray actor
    *_rows(
        Stage.STARTUP,
        _ENGINE_PY,
        "init _init_normal _init_external",
        cls="SGLangEngine",
        what="engine startup",
    ),
    # a function nested in SGLangEngine._init_normal (py-spy's qualname owner is `<locals>`)
    FrameSig("_sanity_check_server_args", Stage.STARTUP, _ENGINE_PY, what="engine startup"),
    *_rows(
        Stage.STARTUP,
        _ENGINE_PY,
        "launch_server_process _wait_server_healthy",
        what="engine startup (waiting for the server to be healthy)",
    ),
    *_rows(
        Stage.WEIGHT_SYNC,
        _ENGINE_PY,
        "update_weights_from_tensor init_weights_update_group destroy_weights_update_group "
        "pause_generation continue_generation post_process_weights check_weights",
        cls="SGLangEngine",
        what="engine weight update",
    ),
    FrameSig(
        "update_weights_from_distributed",
        Stage.NCCL_BROADCAST,
        _ENGINE_PY,
        "SGLangEngine",
        "engine weight broadcast",
    ),
    FrameSig("flush_cache", Stage.WEIGHT_SYNC, _ENGINE_PY, "SGLangEngine", generic=True),
    *_rows(
        Stage.OFFLOAD_ONLOAD,
        _ENGINE_PY,
        "release_memory_occupation resume_memory_occupation",
        cls="SGLangEngine",
        what="engine memory release/resume",
    ),
    FrameSig("shutdown", Stage.STARTUP, _ENGINE_PY, "SGLangEngine", generic=True),
    # --- SGLang scheduler / tokenizer (sglang.md §5); file names move between versions
    *_rows(
        Stage.NCCL_BROADCAST,
        _SGLANG,
        "update_weights_from_distributed _update_bucketed_weights_from_distributed "
        "receive_weights_from_distributed _receive_bucketed_weights_from_distributed",
        what="scheduler receiving the weight broadcast",
    ),
    *_rows(
        Stage.WEIGHT_SYNC,
        _SGLANG,
        "init_weights_update_group init_custom_process_group destroy_weights_update_group "
        "update_weights_from_tensor update_weights_from_disk update_weights_from_ipc",
        what="scheduler weight update",
    ),
    # SGLang 0.5.23's weight-update session (`/begin_weight_update`, `/end_weight_update`,
    # entrypoints/http_server.py:1458,1473): the scheduler's WeightUpdater.begin_weight_update /
    # end_weight_update (managers/scheduler_components/weight_updater.py:309,323; each ends in a
    # barrier on the TP CPU group) and the model runner's (model_executor/model_runner_components/
    # weight_updater.py:312,317: restore / post-process the packed weights)
    *_rows(
        Stage.WEIGHT_SYNC,
        _SGLANG,
        "begin_weight_update end_weight_update",
        what="scheduler weight-update session",
    ),
    *_rows(
        Stage.OFFLOAD_ONLOAD,
        _SGLANG,
        "release_memory_occupation resume_memory_occupation",
        what="scheduler memory release/resume",
    ),
    # the admission loop (0.5.15.post1 scheduler.py:2607-2900) and HiCache's prefetch check in it,
    # a collective over the TP group (hiradix_cache.py:1438-1530; sglang#30760)
    *(
        FrameSig(
            f, Stage.ROLLOUT_DISPATCH, _SGLANG, what="scheduler admitting requests", generic=True
        )
        for f in (
            "get_next_batch_to_run",
            "get_new_batch_prefill",
            "_get_new_batch_prefill_raw",
            "check_prefetch_progress",
            "can_terminate_prefetch",
        )
    ),
    *(
        FrameSig(f, Stage.ROLLOUT_DISPATCH, _SGLANG, what="scheduler running a batch", generic=True)
        for f in (
            "run_batch",
            "forward_batch_generation",
            "forward_decode",
            "forward_extend",
            "process_batch_result",
            "process_batch_result_decode",
            "process_batch_result_prefill",
        )
    ),
    *_rows(
        Stage.STARTUP,
        _SGLANG,
        "init_memory_pool init_cuda_graphs capture load_model init_torch_distributed "
        "init_model_worker",
        what="engine startup",
    ),
    FrameSig("__init__", Stage.STARTUP, _SGLANG, "Scheduler", "scheduler startup"),
    FrameSig("__init__", Stage.STARTUP, _SGLANG, "ModelRunner", "model runner startup"),
    # --- torch: group creation is startup unless an outer frame says otherwise
    *(
        FrameSig(f, Stage.STARTUP, "torch/distributed/distributed_c10d.py", generic=True)
        for f in ("init_process_group", "new_group", "_new_group_with_tag")
    ),
)

_JAN_FRAMES: tuple[FrameSig, ...] = (
    FrameSig("init_rollout_engines", Stage.STARTUP, _ROLLOUT_PY, what="engine startup"),
    FrameSig("get_rollout_engines_and_lock", Stage.WEIGHT_SYNC, _ROLLOUT_PY, "RolloutManager"),
    FrameSig("clear_num_new_engines", Stage.WEIGHT_SYNC, _ROLLOUT_PY, "RolloutManager"),
    FrameSig(
        "recover_rollout_engines",
        Stage.STARTUP,
        _ROLLOUT_PY,
        "RolloutManager",
        "FT engine recovery",
    ),
    FrameSig("async_init", Stage.STARTUP, _ACTOR_GROUP, "RayTrainGroup", "train actors init"),
    FrameSig("connect", Stage.STARTUP, _ACTOR_GROUP, "RayTrainGroup"),
    FrameSig("connect_actor_critic", Stage.STARTUP, _ACTOR_PY, "MegatronTrainRayActor"),
    FrameSig("save", Stage.CHECKPOINT, "train.py", what="driver: checkpoint save"),
    FrameSig(
        ANY, Stage.CHECKPOINT, "slime/backends/fsdp_utils/checkpoint.py", what="FSDP checkpoint"
    ),
    FrameSig(ANY, Stage.STARTUP, "slime/router/router.py", what="slime router", generic=True),
    # model.py:720 at 9bfe152 (gone from main: hf_checkpoint_saver.py took its place)
    FrameSig("save_hf_model", Stage.CHECKPOINT, "slime/backends/megatron_utils/model.py"),
)

_HEAD_FRAMES: tuple[FrameSig, ...] = (
    # placement_group.py, sglang_engine.py at 624b824 (not in 9bfe152)
    FrameSig(
        "create_actor_model",
        Stage.STARTUP,
        _PLACEMENT_GROUP_PY,
        what="driver startup (placement group, actors)",
    ),
    FrameSig("_register_to_router", Stage.STARTUP, _ENGINE_PY, "SGLangEngine", "engine startup"),
    *_rows(
        Stage.WEIGHT_SYNC,
        _ENGINE_PY,
        "update_weights_from_disk pull_weights",
        cls="SGLangEngine",
        what="engine weight update",
    ),
    FrameSig("start_rollout_servers", Stage.STARTUP, _ROLLOUT_PY, what="engine startup"),
    FrameSig("start_engines", Stage.STARTUP, _ROLLOUT_PY, "ServerGroup", "engine startup"),
    FrameSig("recover", Stage.STARTUP, _ROLLOUT_PY, "RolloutServer", "FT engine recovery"),
    *_rows(Stage.OFFLOAD_ONLOAD, _ROLLOUT_PY, "offload onload", cls="ServerGroup"),
    *_rows(
        Stage.OFFLOAD_ONLOAD,
        _ROLLOUT_PY,
        "offload onload onload_weights onload_kv",
        cls="RolloutServer",
    ),
    FrameSig("get_updatable_engines_and_lock", Stage.WEIGHT_SYNC, _ROLLOUT_PY, "RolloutManager"),
    FrameSig("clear_updatable_num_new_engines", Stage.WEIGHT_SYNC, _ROLLOUT_PY, "RolloutManager"),
    FrameSig(
        "recover_updatable_engines",
        Stage.STARTUP,
        _ROLLOUT_PY,
        "RolloutManager",
        "FT engine recovery",
    ),
    FrameSig("create", Stage.STARTUP, _ACTOR_GROUP, "RayTrainGroup", "train actors init"),
    FrameSig("release", Stage.TRAIN, _ACTOR_GROUP, "RayTrainGroup"),
    FrameSig("_reload_rollout_weights_from_disk", Stage.WEIGHT_SYNC, _ACTOR_GROUP, "RayTrainGroup"),
    FrameSig(
        ANY,
        Stage.ROLLOUT_DISPATCH,
        "slime/backends/sglang_utils/server_control.py",
        what="abort tail (abort until idle)",
    ),
    # Disk weight sync (624b824): UpdateWeightFromDisk.update_weights
    # (update_weight/update_weight_from_disk.py:66) writes the HF weights through
    # save_hf_model_to_path (:77), then RayTrainGroup._reload_rollout_weights_from_disk
    # (actor_group.py:227) has the engines reload them; the delta mode
    # (update_weight_from_disk_delta.py:84) publishes deltas the engines pull.
    FrameSig(
        "update_weights",
        Stage.WEIGHT_SYNC,
        _UPDATE_WEIGHT_DIR + "update_weight_from_disk.py",
        "UpdateWeightFromDisk",
        "disk weight sync (writing the HF weights the engines reload)",
    ),
    FrameSig(
        "update_weights",
        Stage.WEIGHT_SYNC,
        _UPDATE_WEIGHT_DIR + "update_weight_from_disk_delta.py",
        "UpdateWeightFromDiskDelta",
        "disk weight sync (publishing weight deltas)",
    ),
    # hf_checkpoint_saver.py (save_hf_model_to_path :24, save_hf_model_direct_to_path :44) is
    # shared by the HF checkpoint save (MegatronTrainRayActor.save_model, actor.py:590) and the
    # disk weight sync (update_weight_from_disk.py:77): the outer frame decides.
    FrameSig(
        ANY,
        Stage.CHECKPOINT,
        "slime/backends/megatron_utils/hf_checkpoint_saver.py",
        what="HF save (checkpoint or disk weight sync)",
        generic=True,
    ),
)

# --------------------------------------------------------------------------- miles

# radixark/miles @ 31f1ca961 keeps slime's classes under `miles/`. Where a file kept its place
# (`slime/X` -> `miles/X`), the row is slime's, renamed by `_in_miles`; the files miles moved or
# dropped are left out (_NOT_IN_MILES) and the moved ones have their own rows (_MILES_FRAMES).
_NOT_IN_MILES = (
    "slime/ray/",  # split into miles/ray/rollout/*.py and miles/ray/train/ (rows below)
    "slime/backends/megatron_utils/loss.py",  # no loss.py, data.py, cp_utils.py in miles
    "slime/backends/megatron_utils/data.py",
    "slime/backends/megatron_utils/cp_utils.py",
    "slime/backends/megatron_utils/hf_checkpoint_saver.py",  # miles: hf_export.py
    _UPDATE_FROM_DISTRIBUTED_PY,  # miles: update_weight_from_distributed/ (a package)
    _UPDATE_WEIGHT_DIR + "update_weight_from_disk.py",
    _UPDATE_WEIGHT_DIR + "update_weight_from_disk_delta.py",
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


def _in_miles(rows: tuple[FrameSig, ...]) -> tuple[FrameSig, ...]:
    """slime's rows for the files miles keeps in place, `slime/` renamed `miles/`; rows on other
    trees (Megatron, SGLang, torch, sympy...) as they are."""
    out: list[FrameSig] = []
    for sig in rows:
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
_MILES_FRAMES: tuple[FrameSig, ...] = (
    # miles/ray/placement_group.py:51, :108, :126, :187
    *_rows(
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
    *_rows(Stage.ROLLOUT_DISPATCH, _M_RM, "generate _get_rollout_data", cls="RolloutManager"),
    *_rows(Stage.EVAL, _M_RM, "eval _eval_checkpoint", cls="RolloutManager", what="eval rollout"),
    *_rows(Stage.CHECKPOINT, _M_RM, "save load", cls="RolloutManager"),
    *_rows(
        Stage.OFFLOAD_ONLOAD,
        _M_RM,
        "offload onload onload_weights onload_kv",
        cls="RolloutManager",
        what="engine offload/onload",
    ),
    *_rows(
        Stage.WEIGHT_SYNC,
        _M_RM,
        "get_updatable_engines_and_lock clear_updatable_has_new_engines check_weights",
        cls="RolloutManager",
    ),
    *_rows(
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
    *_rows(
        Stage.STARTUP,
        _MR + "rollout_server.py",
        "recover wait_all_engines_alive",
        cls="RolloutServer",
        what="engine startup / recovery",
    ),
    *_rows(Stage.OFFLOAD_ONLOAD, _MR + "rollout_server.py", "offload onload", cls="RolloutServer"),
    # server_group.py:58 start_engines, :235 offload, :244 onload, :253 onload_weights_from_disk
    FrameSig("start_engines", Stage.STARTUP, _MR + "server_group.py", "ServerGroup", "engines"),
    *_rows(
        Stage.OFFLOAD_ONLOAD,
        _MR + "server_group.py",
        "offload onload onload_weights_from_disk",
        cls="ServerGroup",
    ),
    # train_data_conversion.py:50 convert_samples_to_train_data, :274 split_train_data_by_dp
    *_rows(
        Stage.ROLLOUT_DISPATCH,
        _MR + "train_data_conversion.py",
        "convert_samples_to_train_data split_train_data_by_dp",
        what="rollout data conversion",
    ),
    # RayTrainGroup, miles/ray/train/group.py:135 train, :229 init, :247 save_model,
    # :255 update_weights, :284 onload, :290 offload, :296 clear_memory, :300 set_rollout_manager
    FrameSig("train", Stage.TRAIN, _M_GROUP, "RayTrainGroup", "driver: train step"),
    *_rows(Stage.STARTUP, _M_GROUP, "init set_rollout_manager", cls="RayTrainGroup"),
    FrameSig("save_model", Stage.CHECKPOINT, _M_GROUP, "RayTrainGroup", "driver: checkpoint save"),
    FrameSig("update_weights", Stage.WEIGHT_SYNC, _M_GROUP, "RayTrainGroup", "driver: weight sync"),
    *_rows(Stage.OFFLOAD_ONLOAD, _M_GROUP, "onload offload clear_memory", cls="RayTrainGroup"),
    # TrainRayActor, miles/ray/train_actor.py:79 init
    FrameSig(
        "init", Stage.STARTUP, "miles/ray/train_actor.py", "TrainRayActor", "train actor init"
    ),
    # FSDPTrainRayActor, miles/backends/fsdp_utils/actor.py:63 init, :321 sleep, :335 wake_up,
    # :345 save_model, :439 train, :475 _train_core, :589 _train_step, :608 update_weights. Pinned
    # to miles's file, not to the class: a class row would match anywhere, and slime's own FSDP
    # backend (9bfe152 slime/backends/fsdp_utils/) is left to its Timer logs (docs/verdict.md).
    FrameSig("init", Stage.STARTUP, _M_FSDP, what="train actor init"),
    *_rows(Stage.TRAIN, _M_FSDP, "train _train_core _train_step sleep wake_up", what="train step"),
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
    *_rows(
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

# --------------------------------------------------------------------------- slime's next layout

# slime's open work (THUDM/slime@15b8e507, not in main): a named, detached ServingCluster actor
# owns the routers, engines, health monitors and the weight-update lock (slime/ray/serving.py);
# every other file is main's (the 2026-08 rows). Each row: file:line of serving.py at 15b8e507.
_SERVING_PY = "slime/ray/serving.py"
_NEXT_FRAMES: tuple[FrameSig, ...] = (
    # :27-51 the constructor: placement groups, `start_rollout_servers` (routers and engines),
    # waiting for the engines' init; :81 attach_training (a trainer takes the serving session),
    # :185 recover_updatable_engines (FT recovery)
    *_rows(
        Stage.STARTUP,
        _SERVING_PY,
        "__init__ attach_training recover_updatable_engines",
        cls="ServingCluster",
        what="serving cluster start-up",
    ),
    # :157 get_updatable_engines_and_lock, :192 clear_updatable_num_new_engines, :227 check_weights
    *_rows(
        Stage.WEIGHT_SYNC,
        _SERVING_PY,
        "get_updatable_engines_and_lock clear_updatable_num_new_engines check_weights",
        cls="ServingCluster",
    ),
    # :210 offload, :215 onload, :219 onload_weights, :223 onload_kv
    *_rows(
        Stage.OFFLOAD_ONLOAD,
        _SERVING_PY,
        "offload onload onload_weights onload_kv",
        cls="ServingCluster",
        what="engine offload/onload",
    ),
)

# --------------------------------------------------------------------------- Ray method tables


def _methods(cls: str, stage: Stage, names: str, what: str = "") -> tuple[MethodSig, ...]:
    return tuple(MethodSig(cls, m, stage, what) for m in names.split())


_TRAIN_CLS = "MegatronTrainRayActor"

_COMMON_METHODS: tuple[MethodSig, ...] = (
    *_methods(_TRAIN_CLS, Stage.STARTUP, "__init__ init set_rollout_manager load_other_checkpoint"),
    *_methods(_TRAIN_CLS, Stage.TRAIN, "train sleep wake_up clear_memory"),
    *_methods(_TRAIN_CLS, Stage.CHECKPOINT, "save_model"),
    *_methods(_TRAIN_CLS, Stage.WEIGHT_SYNC, "update_weights"),
    *_methods("RolloutManager", Stage.STARTUP, "__init__ set_train_parallel_config"),
    *_methods("RolloutManager", Stage.ROLLOUT_DISPATCH, "generate"),
    *_methods("RolloutManager", Stage.EVAL, "eval"),
    *_methods("RolloutManager", Stage.OFFLOAD_ONLOAD, "offload onload onload_weights onload_kv"),
    *_methods("RolloutManager", Stage.WEIGHT_SYNC, "check_weights"),
    *_methods("RolloutManager", Stage.CHECKPOINT, "save load"),
    *_methods("SGLangEngine", Stage.STARTUP, "__init__ init"),
    *_methods(
        "SGLangEngine",
        Stage.WEIGHT_SYNC,
        "update_weights_from_tensor init_weights_update_group destroy_weights_update_group "
        "pause_generation continue_generation post_process_weights update_weights_from_disk "
        "pull_weights check_weights",
    ),
    *_methods("SGLangEngine", Stage.NCCL_BROADCAST, "update_weights_from_distributed"),
    *_methods(
        "SGLangEngine", Stage.OFFLOAD_ONLOAD, "release_memory_occupation resume_memory_occupation"
    ),
    *_methods("Lock", Stage.NCCL_BROADCAST, "acquire release"),
)

_JAN_METHODS: tuple[MethodSig, ...] = (
    *_methods(_TRAIN_CLS, Stage.STARTUP, "connect_actor_critic"),
    *_methods(
        "RolloutManager", Stage.WEIGHT_SYNC, "get_rollout_engines_and_lock clear_num_new_engines"
    ),
    *_methods("RolloutManager", Stage.STARTUP, "recover_rollout_engines"),
)

_HEAD_METHODS: tuple[MethodSig, ...] = (
    *_methods(
        "RolloutManager",
        Stage.WEIGHT_SYNC,
        "get_updatable_engines_and_lock clear_updatable_num_new_engines",
    ),
    *_methods("RolloutManager", Stage.STARTUP, "recover_updatable_engines"),
)

# rollout_manager.py:303, :324, :330 at 31f1ca961 (FSDPTrainRayActor's methods have no rows: Ray
# titles them alike in slime's FSDP backend, which the tables leave to its logs)
_MILES_METHODS: tuple[MethodSig, ...] = (
    *_methods(
        "RolloutManager",
        Stage.WEIGHT_SYNC,
        "get_updatable_engines_and_lock clear_updatable_has_new_engines",
    ),
    *_methods("RolloutManager", Stage.STARTUP, "recover_updatable_engines"),
    # SGLangEngine (sglang_engine.py:636, :640, :644, :370, :510, :413 at 31f1ca961; the callers
    # are in the frame rows above)
    *_methods(
        "SGLangEngine",
        Stage.WEIGHT_SYNC,
        "begin_weight_update end_weight_update update_weight_version "
        "load_lora_adapter_from_tensors unload_lora_adapter",
    ),
    *_methods("SGLangEngine", Stage.NCCL_BROADCAST, "load_lora_adapter_from_distributed"),
    # MultiLoRAController (miles/ray/multi_lora/controller.py:60): created and started by the
    # driver (train_multi_lora_async.py:46-47; start :67); record_weight_update (:88) is called
    # once a weight push landed (multi_lora_utils.py:489, commit_weight_push). Its other methods
    # are registry reads and writes of an async actor, answered at once: no stage of their own.
    *_methods("MultiLoRAController", Stage.STARTUP, "__init__ start"),
    *_methods("MultiLoRAController", Stage.WEIGHT_SYNC, "record_weight_update"),
)

# ServingCluster's methods, as the frame rows above (serving.py at 15b8e507)
_NEXT_METHODS: tuple[MethodSig, ...] = (
    *_methods(
        "ServingCluster", Stage.STARTUP, "__init__ attach_training recover_updatable_engines"
    ),
    *_methods(
        "ServingCluster",
        Stage.WEIGHT_SYNC,
        "get_updatable_engines_and_lock clear_updatable_num_new_engines check_weights",
    ),
    *_methods("ServingCluster", Stage.OFFLOAD_ONLOAD, "offload onload onload_weights onload_kv"),
)

# Every row names a real function of a real tree: tests/unit/test_signature_layouts.py checks each
# against the (file, function) lists that scripts/extract_layout_functions.py read from the trees
# (tests/fixtures/layouts/: these slime commits, Megatron-LM, Megatron-Bridge, the SGLang 0.5.15.post1
# and 0.5.23 wheels, torch 2.13.0, sympy, math-verify, latex2sympy2).
LAYOUTS: dict[str, Layout] = {
    "2026-01": Layout(
        "2026-01",
        _COMMON_FRAMES + _JAN_FRAMES,
        _COMMON_METHODS + _JAN_METHODS,
        "THUDM/slime@9bfe15250e82baebf405fc824d1708f779d44406",
    ),
    "2026-08": Layout(
        "2026-08",
        _COMMON_FRAMES + _HEAD_FRAMES,
        _COMMON_METHODS + _HEAD_METHODS,
        "THUDM/slime@624b824a898ab0ec1fcb4d373004c7f3852bf515",
    ),
    "miles-2026-08": Layout(
        "miles-2026-08",
        _in_miles(_COMMON_FRAMES + _HEAD_FRAMES) + _MILES_FRAMES,
        _COMMON_METHODS + _MILES_METHODS,
        "radixark/miles@31f1ca961a94cb860cec3b2dea34ec332bfa8f76",
    ),
    # only the rows slime's next layout adds: its other files are main's (2026-08)
    "slime-next": Layout(
        "slime-next",
        _NEXT_FRAMES,
        _NEXT_METHODS,
        "THUDM/slime@15b8e507118c1f53a7e56966ecc86202bca4a284",
    ),
}


def _all_frame_sigs() -> tuple[FrameSig, ...]:
    seen: dict[FrameSig, None] = {}
    for layout in LAYOUTS.values():
        for sig in layout.frames:
            seen.setdefault(sig, None)
    return tuple(seen)


def _all_method_sigs() -> dict[tuple[str, str], MethodSig]:
    out: dict[tuple[str, str], MethodSig] = {}
    for layout in LAYOUTS.values():
        for sig in layout.methods:
            out.setdefault((sig.cls, sig.method), sig)
    return out


ALL_FRAME_SIGS = _all_frame_sigs()
_METHODS = _all_method_sigs()

# --------------------------------------------------------------------------- matching


def norm_path(path: str) -> str:
    return path.replace("\\", "/")


def _file_matches(pattern: str, frame: Frame) -> bool:
    for path in (frame.filename, frame.short_filename):
        if not path:
            continue
        p = "/" + norm_path(path).lstrip("/")
        if pattern.endswith("/"):
            if "/" + pattern in p:
                return True
        elif p.endswith("/" + pattern):
            return True
    return False


def split_name(name: str) -> tuple[str | None, str]:
    """`Class.method` -> (`Class`, `method`); `<locals>` chains keep their last owner."""
    if "." not in name:
        return None, name
    owner, func = name.rsplit(".", 1)
    return owner.rsplit(".", 1)[-1], func


def sig_matches(sig: FrameSig, frame: Frame) -> bool:
    owner, func = split_name(frame.name)
    if sig.func not in (ANY, func):
        return False
    if sig.cls is not None and owner is not None and owner != sig.cls:
        return False
    if sig.file is not None:
        if _file_matches(sig.file, frame):
            return True
        # py-spy on Python >= 3.11 qualifies methods: the class alone identifies a slime method even
        # when the file is not where this table expects it (a fork, a copied script).
        return sig.func != ANY and sig.cls is not None and owner == sig.cls
    return sig.func != ANY and (sig.cls is None or owner == sig.cls)


def _index(sigs: tuple[FrameSig, ...]) -> dict[str, tuple[FrameSig, ...]]:
    out: dict[str, list[FrameSig]] = {}
    for sig in sigs:
        out.setdefault(sig.func, []).append(sig)
    return {k: tuple(v) for k, v in out.items()}


_BY_FUNC = _index(ALL_FRAME_SIGS)


def match_frame(frame: Frame) -> FrameSig | None:
    """The most specific signature that matches one frame (None: the frame tells no stage)."""
    if frame.native:
        return None
    return _match(frame.name, frame.filename, frame.short_filename)


@lru_cache(maxsize=65536)
def _match(name: str, filename: str, short_filename: str) -> FrameSig | None:
    frame = Frame(name=name, filename=filename, short_filename=short_filename)
    func = split_name(name)[1]
    # A row matched by its class alone (its file is elsewhere: a fork, a copied script) yields to
    # one whose file matches too: slime's RolloutManager.generate in slime/ray/rollout.py is
    # slime's row, not miles's (miles/ray/rollout/rollout_manager.py), however long its path.
    best: FrameSig | None = None
    best_key: tuple[bool, tuple[int, int]] | None = None
    for sig in _BY_FUNC.get(func, ()) + _BY_FUNC.get(ANY, ()):
        if not sig_matches(sig, frame):
            continue
        key = (sig.file is None or _file_matches(sig.file, frame), sig.specificity)
        if best_key is None or key > best_key:
            best, best_key = sig, key
    return best


def layouts_of(sig: FrameSig) -> tuple[str, ...]:
    """The slime layouts whose tables hold this row."""
    return tuple(name for name, layout in LAYOUTS.items() if sig in layout.frames)


def method_stage(class_name: str | None, method: str | None) -> MethodSig | None:
    if not class_name or not method:
        return None
    return _METHODS.get((class_name, method))


# --------------------------------------------------------------------------- what a thread waits on


class Block(str, Enum):
    """What a thread is doing, from its innermost recognisable frame."""

    COLLECTIVE = "collective"  # inside a torch.distributed collective / Work.wait / PP p2p
    RENDEZVOUS = "rendezvous"  # creating a process group: waiting for peers to join
    CUDA_SYNC = "cuda_sync"  # at a CUDA sync point (a stuck NCCL kernel shows here)
    RAY_GET = "ray_get"  # ray.get / ray.wait on another actor's result
    WAIT = "wait"  # in-process wait: Future.result, Event/Condition.wait, Queue.get, join
    HTTP = "http"  # blocking HTTP / socket read
    EVENT_LOOP = "event_loop"  # asyncio / uvloop loop idle in select: coroutines wait on I/O
    SUBPROCESS = "subprocess"  # waiting for a child process
    SLEEP = "sleep"  # time.sleep (native frames only)
    IDLE_WORKER = "idle_worker"  # a Ray worker waiting for its next task
    CPU = "cpu"  # running Python code (active thread, no wait frame)
    PARKED = "parked"  # idle thread in user code: time.sleep or another blocking C call
    UNKNOWN = "unknown"


WAITING_BLOCKS = frozenset(
    {
        Block.COLLECTIVE,
        Block.RENDEZVOUS,
        Block.CUDA_SYNC,
        Block.RAY_GET,
        Block.WAIT,
        Block.HTTP,
        Block.EVENT_LOOP,
        Block.SUBPROCESS,
        Block.SLEEP,
        Block.IDLE_WORKER,
    }
)
COLLECTIVE_BLOCKS = frozenset({Block.COLLECTIVE, Block.RENDEZVOUS, Block.CUDA_SYNC})


@dataclass(frozen=True)
class WaitSig:
    """`own_call`: a Python frame that waits in a native call it makes itself, with no Python frame
    below it (`handle.wait()` on a c10d Work): it is the wait only as the thread's innermost Python
    frame, and only while the thread is idle (the GIL released) or --native shows no other wait."""

    block: Block
    func: str
    file: str | None = None  # suffix or folder, as FrameSig.file
    native: bool = False  # matches native frames (py-spy --native): substring of the name
    own_call: bool = False


_C10D = "torch/distributed/distributed_c10d.py"


def _waits(block: Block, file: str | None, funcs: str) -> tuple[WaitSig, ...]:
    return tuple(WaitSig(block, f, file) for f in funcs.split())


def _native(block: Block, names: str) -> tuple[WaitSig, ...]:
    return tuple(WaitSig(block, n, None, native=True) for n in names.split())


WAITS: tuple[WaitSig, ...] = (
    *_waits(
        Block.RENDEZVOUS,
        _C10D,
        "init_process_group new_group _new_group_with_tag _store_based_barrier "
        "_create_process_group_wrapper",
    ),
    WaitSig(Block.RENDEZVOUS, ANY, "torch/distributed/rendezvous.py"),
    WaitSig(Block.RENDEZVOUS, "init_process_group", "slime/utils/distributed_utils.py"),
    WaitSig(Block.RENDEZVOUS, "init_custom_process_group", "sglang/srt/"),
    WaitSig(Block.COLLECTIVE, ANY, _C10D),
    *_waits(Block.COLLECTIVE, "slime/utils/reloadable_process_group.py", "new_function _fwd"),
    WaitSig(Block.COLLECTIVE, ANY, "megatron/core/pipeline_parallel/p2p_communication.py"),
    # SGLang's scheduler idle loop: TP0 polls for requests, TP>0 ranks wait in broadcast_pyobj for
    # TP0's (empty) request list. Idle, not a stuck collective.
    *_waits(
        Block.EVENT_LOOP,
        "sglang/srt/",
        "broadcast_pyobj recv_requests _pull_raw_reqs on_idle maybe_sleep_on_idle",
    ),
    # SGLang's scheduler receiving the weight broadcast posts every `broadcast(async_op=True)`, then
    # waits in `handle.wait()` (native: c10d::Work::wait) in the same frame, with no `broadcast`
    # frame below: 0.5.15.post1 model_runner.py:2095-2113 (`ModelRunner.update_weights_from_
    # distributed`), 0.5.21+ model_runner_components/weight_updater.py (`receive_weights_from_
    # distributed`). Nothing else these functions call directly blocks.
    *(
        WaitSig(Block.COLLECTIVE, f, "sglang/srt/model_executor/", own_call=True)
        for f in ("update_weights_from_distributed", "receive_weights_from_distributed")
    ),
    *_waits(Block.CUDA_SYNC, "torch/cuda/__init__.py", "synchronize"),
    *_waits(Block.CUDA_SYNC, "torch/cuda/streams.py", "synchronize wait_event query"),
    *_waits(Block.RAY_GET, "ray/_private/worker.py", "get get_objects wait"),
    WaitSig(Block.IDLE_WORKER, "main_loop", "ray/_private/worker.py"),
    *_waits(
        Block.WAIT, "concurrent/futures/_base.py", "result wait as_completed _wait_for_tstate_lock"
    ),
    *_waits(Block.WAIT, "threading.py", "wait join _wait_for_tstate_lock acquire"),
    *_waits(Block.WAIT, "queue.py", "get put join"),
    *_waits(Block.WAIT, "multiprocessing/connection.py", "recv recv_bytes poll _poll wait"),
    *_waits(Block.WAIT, "multiprocessing/pool.py", "get wait"),
    WaitSig(Block.WAIT, ANY, "zmq/"),
    WaitSig(Block.HTTP, ANY, "requests/"),
    WaitSig(Block.HTTP, ANY, "urllib3/"),
    WaitSig(Block.HTTP, ANY, "http/client.py"),
    WaitSig(Block.HTTP, ANY, "httpx/"),
    WaitSig(Block.HTTP, ANY, "httpcore/"),
    WaitSig(Block.HTTP, ANY, "aiohttp/"),
    WaitSig(Block.HTTP, ANY, "urllib/request.py"),
    *_waits(Block.HTTP, "socket.py", "readinto recv recv_into accept create_connection"),
    *_waits(Block.HTTP, "ssl.py", "read recv recv_into do_handshake"),
    *_waits(Block.EVENT_LOOP, "selectors.py", "select"),
    *_waits(Block.EVENT_LOOP, "asyncio/base_events.py", "_run_once run_forever run_until_complete"),
    *_waits(Block.EVENT_LOOP, "asyncio/runners.py", "run"),
    *_waits(Block.SUBPROCESS, "subprocess.py", "wait _wait _try_wait communicate _communicate"),
    *_waits(Block.SUBPROCESS, "multiprocessing/popen_fork.py", "wait poll"),
    *_native(
        Block.COLLECTIVE,
        "c10d::Work::wait WorkNCCL::wait WorkNCCL::synchronize ncclGroupEnd ncclBroadcast "
        "ncclAllReduce ncclAllGather ncclReduceScatter ncclSend ncclRecv gloo::",
    ),
    *_native(Block.RENDEZVOUS, "ncclCommInitRank TCPStore::wait TCPStore::get"),
    *_native(
        Block.CUDA_SYNC,
        "cudaDeviceSynchronize cuCtxSynchronize cudaStreamSynchronize cuStreamSynchronize "
        "cudaEventSynchronize cuEventSynchronize cudaMemcpy cuMemcpyDtoH",
    ),
    *_native(Block.SLEEP, "clock_nanosleep nanosleep"),
)

# Frames that are plumbing around a call (decorators, tracing): never the answer to "where".
TRANSPARENT_FILES = (
    "torch/distributed/c10d_logger.py",
    "ray/util/tracing/",
    "ray/_private/client_mode_hook.py",
    "ray/_private/auto_init_hook.py",
    "ray/_private/function_manager.py",
    "slime/utils/timer.py",
    "slime/observability/timer.py",
    "torch/utils/_contextlib.py",
    "contextlib.py",
    "functools.py",
)


# Collectives that are a scheduler's request intake, not a stuck collective: SGLang's TP ranks
# other than 0 wait in `broadcast_pyobj` (utils/common.py:2132-2178, a blocking `dist.broadcast` of
# TP rank 0's request list, called by `recv_requests` -> `_broadcast_reqs_across_ranks`,
# scheduler_components/request_receiver.py:141-201) until rank 0 comes back for its next requests.
# py-spy shows torch's `broadcast` innermost (and gloo/NCCL native frames under --native): the
# caller decides. Such a rank waits for its rank 0: idle when rank 0 is, never the one to blame.
# A pipeline stage after the first (pp_rank > 0) takes its requests from the previous stage:
# `SchedulerRequestReceiver._pull_raw_reqs` -> `point_to_point_pyobj` (utils/common.py), a blocking
# p2p `recv` from the previous stage (request_receiver.py:101-139, SGLang 0.5.8 and later): such a
# stage waits for its predecessor's next requests (sglang#17941: PP1 in `_pull_raw_reqs` is intake,
# not the culprit). `INTAKE_VIA` are the helpers between the collective and the intake caller.
INTAKE_CALLERS: tuple[tuple[str, str], ...] = (
    ("broadcast_pyobj", "sglang/srt/"),
    ("_pull_raw_reqs", "sglang/srt/"),
)
INTAKE_VIA: tuple[tuple[str, str], ...] = (("point_to_point_pyobj", "sglang/srt/"),)


def is_intake_caller(frame: Frame) -> bool:
    """Whether the frame is a scheduler's request-intake broadcast (see INTAKE_CALLERS)."""
    if frame.native:
        return False
    func = split_name(frame.name)[1]
    return any(func == f and _file_matches(path, frame) for f, path in INTAKE_CALLERS)


def is_intake_via(frame: Frame) -> bool:
    """Whether the frame is a helper between an intake collective and its caller (INTAKE_VIA)."""
    if frame.native:
        return False
    func = split_name(frame.name)[1]
    return any(func == f and _file_matches(path, frame) for f, path in INTAKE_VIA)


def wait_of(frame: Frame) -> WaitSig | None:
    """The wait primitive a frame is, if any."""
    return _wait_of(frame.name, frame.filename, frame.short_filename, frame.native)


@lru_cache(maxsize=65536)
def _wait_of(name: str, filename: str, short_filename: str, native: bool) -> WaitSig | None:
    frame = Frame(name=name, filename=filename, short_filename=short_filename, native=native)
    for sig in WAITS:
        if sig.native:
            if frame.native and sig.func in frame.name:
                return sig
            continue
        if frame.native:
            continue
        _, func = split_name(frame.name)
        if sig.func not in (ANY, func):
            continue
        if sig.file is None or _file_matches(sig.file, frame):
            return sig
    return None


def is_transparent(frame: Frame) -> bool:
    return any(_file_matches(f, frame) for f in TRANSPARENT_FILES)


# --------------------------------------------------------------------------- layout hints

# Files whose presence on a stack tells which slime layout runs (timer.py moved in 2026-08).
LAYOUT_HINT_FILES: tuple[tuple[str, str], ...] = (
    ("slime/utils/timer.py", "2026-01"),
    ("slime/backends/megatron_utils/update_weight/hf_weight_iterator_bridge.py", "2026-01"),
    ("slime/router/router.py", "2026-01"),
    ("slime/observability/", "2026-08"),
    ("slime/backends/sglang_utils/server_control.py", "2026-08"),
)


@lru_cache(maxsize=8192)
def layout_hint(frame: Frame) -> str | None:
    """The slime layout a frame belongs to, when its file exists in one layout only. Cached by
    the frame's value: the ranks of a large job share most frames (issue 46: 64 nodes read
    ~44,000 frames of ~1,300 processes, a few hundred distinct)."""
    for pattern, layout in LAYOUT_HINT_FILES:
        if _file_matches(pattern, frame):
            return layout
    sig = match_frame(frame)
    if sig is not None:
        names = layouts_of(sig)
        if len(names) == 1:
            return names[0]
    return None

"""slime's rows, one `Layout` per slime source layout (`2026-01` = commit 9bfe152, `2026-08` =
commit 624b824, see docs slime.md; `slime-next` = the rows slime's open ServingCluster work adds,
THUDM/slime 15b8e507; miles's rows are miles.py's). A new slime release is a few rows here: no code
change. The rows of the libraries slime calls (Megatron, SGLang, torch) are their modules' and are
spliced in where slime's stages need them: the order of the tables is kept as it was read.

This module also names the slime frames that other modules compare (the known bugs' frames, the
asyncio loop thread): every frame name the code compares lives in this package.
"""

from __future__ import annotations

from slime_hangdoctor.analysis.signatures import megatron, sglang, torch
from slime_hangdoctor.analysis.signatures.common import (
    ANY,
    Block,
    FrameSig,
    MethodSig,
    WaitSig,
    methods,
    rows,
    waits,
)
from slime_hangdoctor.verdict import Stage

ROLLOUT_PY = "slime/ray/rollout.py"
ACTOR_PY = "slime/backends/megatron_utils/actor.py"
TRAIN_ACTOR_PY = "slime/ray/train_actor.py"
ENGINE_PY = "slime/backends/sglang_utils/sglang_engine.py"
UPDATE_WEIGHT_DIR = "slime/backends/megatron_utils/update_weight/"
UPDATE_FROM_DISTRIBUTED_PY = UPDATE_WEIGHT_DIR + "update_weight_from_distributed.py"
UPDATE_FROM_TENSOR_PY = UPDATE_WEIGHT_DIR + "update_weight_from_tensor.py"
ACTOR_GROUP = "slime/ray/actor_group.py"
PLACEMENT_GROUP_PY = "slime/ray/placement_group.py"
FSDP_ACTOR_PY = "slime/backends/fsdp_utils/actor.py"
FSDP_TRAIN_CLS = "FSDPTrainRayActor"

COMMON_FRAMES: tuple[FrameSig, ...] = (
    # --- driver: startup and the per-step calls into actor groups
    *rows(
        Stage.STARTUP,
        PLACEMENT_GROUP_PY,
        "create_placement_groups _create_placement_group create_rollout_manager "
        "create_training_models allocate_train_group",
        what="driver startup (placement group, actors)",
    ),
    FrameSig(
        "update_weights", Stage.WEIGHT_SYNC, ACTOR_GROUP, "RayTrainGroup", "driver: weight sync"
    ),
    FrameSig("async_train", Stage.TRAIN, ACTOR_GROUP, "RayTrainGroup", "driver: train step"),
    FrameSig(
        "save_model", Stage.CHECKPOINT, ACTOR_GROUP, "RayTrainGroup", "driver: checkpoint save"
    ),
    *rows(Stage.OFFLOAD_ONLOAD, ACTOR_GROUP, "onload offload clear_memory", cls="RayTrainGroup"),
    FrameSig("set_rollout_manager", Stage.STARTUP, ACTOR_GROUP, "RayTrainGroup"),
    FrameSig(
        "offload_train", Stage.OFFLOAD_ONLOAD, "train.py", what="driver: offload train actors"
    ),
    # --- RolloutManager (slime/ray/rollout.py)
    FrameSig("__init__", Stage.STARTUP, ROLLOUT_PY, "RolloutManager", "rollout manager startup"),
    FrameSig("_start_router", Stage.STARTUP, ROLLOUT_PY, what="router launch"),
    FrameSig(
        "_allocate_rollout_engine_addr_and_ports_normal", Stage.STARTUP, ROLLOUT_PY, what="engines"
    ),
    FrameSig("generate", Stage.ROLLOUT_DISPATCH, ROLLOUT_PY, "RolloutManager", "rollout generate"),
    FrameSig("_get_rollout_data", Stage.ROLLOUT_DISPATCH, ROLLOUT_PY, "RolloutManager"),
    FrameSig("eval", Stage.EVAL, ROLLOUT_PY, "RolloutManager", "eval rollout"),
    *rows(
        Stage.ROLLOUT_DISPATCH,
        ROLLOUT_PY,
        "_convert_samples_to_train_data _split_train_data_by_dp _post_process_rewards",
        cls="RolloutManager",
        what="rollout data conversion",
    ),
    *rows(
        Stage.OFFLOAD_ONLOAD,
        ROLLOUT_PY,
        "offload onload onload_weights onload_kv",
        cls="RolloutManager",
        what="engine offload/onload",
    ),
    FrameSig("set_train_parallel_config", Stage.STARTUP, ROLLOUT_PY, "RolloutManager"),
    *rows(
        Stage.CHECKPOINT,
        ROLLOUT_PY,
        "save load",
        cls="RolloutManager",
        what="rollout manager saving / loading its data-source state",
    ),
    FrameSig("check_weights", Stage.WEIGHT_SYNC, ROLLOUT_PY, "RolloutManager"),
    # --- rollout functions (the RolloutManager's asyncio loop thread and main thread)
    FrameSig(
        "generate_rollout", Stage.ROLLOUT_DISPATCH, "slime/rollout/", what="rollout", generic=True
    ),
    FrameSig(
        "call_rollout_fn", Stage.ROLLOUT_DISPATCH, "slime/rollout/base_types.py", generic=True
    ),
    *rows(
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
    FrameSig("init", Stage.STARTUP, ACTOR_PY, "MegatronTrainRayActor", "train actor init"),
    FrameSig("init", Stage.STARTUP, TRAIN_ACTOR_PY, "TrainRayActor", "train actor init"),
    FrameSig("load_other_checkpoint", Stage.STARTUP, ACTOR_PY, "MegatronTrainRayActor"),
    *rows(
        Stage.TRAIN,
        ACTOR_PY,
        "train train_actor train_critic compute_log_prob _get_rollout_data "
        "fill_routing_replay sleep wake_up",
        cls="MegatronTrainRayActor",
        what="train step",
    ),
    FrameSig("clear_memory", Stage.TRAIN, TRAIN_ACTOR_PY, "TrainRayActor"),
    FrameSig("update_weights", Stage.WEIGHT_SYNC, ACTOR_PY, "MegatronTrainRayActor", "weight sync"),
    FrameSig("process_rollout_data", Stage.TRAIN, None, what="trainer fetching rollout data"),
    *rows(
        Stage.TRAIN,
        "slime/backends/megatron_utils/model.py",
        "train train_one_step forward_only",
        what="train step",
    ),
    FrameSig("train_one_step", Stage.TRAIN, None, what="train step"),
    *rows(
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
    *megatron.TRAIN_FRAMES,
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
    # Megatron's and torch's rows follow slime's own.
    FrameSig("save_model", Stage.CHECKPOINT, ACTOR_PY, "MegatronTrainRayActor", "checkpoint save"),
    FrameSig(
        "save", Stage.CHECKPOINT, "slime/backends/megatron_utils/model.py", what="checkpoint save"
    ),
    FrameSig(
        ANY, Stage.CHECKPOINT, "slime/backends/megatron_utils/checkpoint.py", what="checkpoint load"
    ),
    *rows(Stage.CHECKPOINT, "slime/rollout/data_source.py", "save load", what="data-source state"),
    *megatron.CHECKPOINT_FRAMES,
    *torch.CHECKPOINT_FRAMES,
    # --- weight sync, trainer side
    FrameSig(ANY, Stage.WEIGHT_SYNC, UPDATE_WEIGHT_DIR, what="weight sync"),
    FrameSig(
        ANY, Stage.WEIGHT_SYNC, UPDATE_FROM_TENSOR_PY, what="colocated weight sync (CUDA IPC)"
    ),
    FrameSig(ANY, Stage.WEIGHT_SYNC, UPDATE_FROM_DISTRIBUTED_PY, what="distributed weight sync"),
    # HfWeightIteratorDirect runs under every weight sync that converts to HF (through
    # hf_weight_iterator_base.py:10 at 624b824) and, in slime main, under the HF save too
    # (hf_checkpoint_saver.py:106): the outer frame decides (9bfe152 and 624b824 both have it)
    FrameSig(
        ANY,
        Stage.WEIGHT_SYNC,
        UPDATE_WEIGHT_DIR + "hf_weight_iterator_direct.py",
        what="HF export",
        generic=True,
    ),
    FrameSig(
        "_update_bucket_weights_from_distributed",
        Stage.NCCL_BROADCAST,
        UPDATE_FROM_DISTRIBUTED_PY,
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
    *megatron.BRIDGE_FRAMES,
    *rows(Stage.NCCL_BROADCAST, "slime/ray/utils.py", "acquire release", cls="Lock"),
    # --- SGLangEngine Ray actor
    *rows(
        Stage.STARTUP,
        ENGINE_PY,
        "init _init_normal _init_external",
        cls="SGLangEngine",
        what="engine startup",
    ),
    # a function nested in SGLangEngine._init_normal (py-spy's qualname owner is `<locals>`)
    FrameSig("_sanity_check_server_args", Stage.STARTUP, ENGINE_PY, what="engine startup"),
    *rows(
        Stage.STARTUP,
        ENGINE_PY,
        "launch_server_process _wait_server_healthy",
        what="engine startup (waiting for the server to be healthy)",
    ),
    *rows(
        Stage.WEIGHT_SYNC,
        ENGINE_PY,
        "update_weights_from_tensor init_weights_update_group destroy_weights_update_group "
        "post_process_weights check_weights",
        cls="SGLangEngine",
        what="engine weight update",
    ),
    # The pause and continue run in a weight update (a Ray call of their own: weight_sync) and,
    # with slime PR#2015 (open), inside release_memory_occupation (offload): the outer frame
    # decides, as for flush_cache
    *(
        FrameSig(f, Stage.WEIGHT_SYNC, ENGINE_PY, "SGLangEngine", "engine pause", generic=True)
        for f in ("pause_generation", "continue_generation")
    ),
    FrameSig(
        "update_weights_from_distributed",
        Stage.NCCL_BROADCAST,
        ENGINE_PY,
        "SGLangEngine",
        "engine weight broadcast",
    ),
    FrameSig("flush_cache", Stage.WEIGHT_SYNC, ENGINE_PY, "SGLangEngine", generic=True),
    *rows(
        Stage.OFFLOAD_ONLOAD,
        ENGINE_PY,
        "release_memory_occupation resume_memory_occupation",
        cls="SGLangEngine",
        what="engine memory release/resume",
    ),
    FrameSig("shutdown", Stage.STARTUP, ENGINE_PY, "SGLangEngine", generic=True),
    # --- SGLang scheduler / tokenizer (sglang.py), torch's group creation (torch.py)
    *sglang.SCHEDULER_FRAMES,
    *torch.GROUP_FRAMES,
)

JAN_FRAMES: tuple[FrameSig, ...] = (
    FrameSig("init_rollout_engines", Stage.STARTUP, ROLLOUT_PY, what="engine startup"),
    FrameSig("get_rollout_engines_and_lock", Stage.WEIGHT_SYNC, ROLLOUT_PY, "RolloutManager"),
    FrameSig("clear_num_new_engines", Stage.WEIGHT_SYNC, ROLLOUT_PY, "RolloutManager"),
    FrameSig(
        "recover_rollout_engines",
        Stage.STARTUP,
        ROLLOUT_PY,
        "RolloutManager",
        "FT engine recovery",
    ),
    FrameSig("async_init", Stage.STARTUP, ACTOR_GROUP, "RayTrainGroup", "train actors init"),
    FrameSig("connect", Stage.STARTUP, ACTOR_GROUP, "RayTrainGroup"),
    FrameSig("connect_actor_critic", Stage.STARTUP, ACTOR_PY, "MegatronTrainRayActor"),
    FrameSig("save", Stage.CHECKPOINT, "train.py", what="driver: checkpoint save"),
    FrameSig(
        ANY, Stage.CHECKPOINT, "slime/backends/fsdp_utils/checkpoint.py", what="FSDP checkpoint"
    ),
    # slime's FSDP backend (`--train-backend fsdp`; removed from main by THUDM/slime#1664):
    # FSDPTrainRayActor, fsdp_utils/actor.py at 9bfe152: :48 init, :181 _setup_device_mesh,
    # :224 _fsdp2_load_full_state_dict, :750 _create_ref_model (start-up); :432 train, :495
    # _train_core (the micro-batch loop), :546 _train_step, :296 _compute_log_prob, :361
    # _packed_data (the micro-batch counts), :459 _log_rollout_data, :264 sleep, :278 wake_up
    # (train); :288 save_model; :720 update_weights and update_weight_utils.py (UpdateWeight :32).
    # Pinned to slime's file, not to the class: miles's FSDPTrainRayActor (miles.py) has its own.
    *rows(
        Stage.STARTUP,
        FSDP_ACTOR_PY,
        "init _setup_device_mesh _fsdp2_load_full_state_dict _create_ref_model",
        what="FSDP train actor init",
    ),
    *rows(
        Stage.TRAIN,
        FSDP_ACTOR_PY,
        "train _train_core _train_step _compute_log_prob _packed_data _log_rollout_data "
        "sleep wake_up",
        what="FSDP train step",
    ),
    FrameSig("save_model", Stage.CHECKPOINT, FSDP_ACTOR_PY, what="FSDP checkpoint save"),
    FrameSig("update_weights", Stage.WEIGHT_SYNC, FSDP_ACTOR_PY, what="FSDP weight sync"),
    FrameSig(
        ANY,
        Stage.WEIGHT_SYNC,
        "slime/backends/fsdp_utils/update_weight_utils.py",
        what="FSDP weight sync",
    ),
    *torch.FSDP_FRAMES,
    FrameSig(ANY, Stage.STARTUP, "slime/router/router.py", what="slime router", generic=True),
    # model.py:720 at 9bfe152 (gone from main: hf_checkpoint_saver.py took its place)
    FrameSig("save_hf_model", Stage.CHECKPOINT, "slime/backends/megatron_utils/model.py"),
)

HEAD_FRAMES: tuple[FrameSig, ...] = (
    # placement_group.py, sglang_engine.py at 624b824 (not in 9bfe152)
    FrameSig(
        "create_actor_model",
        Stage.STARTUP,
        PLACEMENT_GROUP_PY,
        what="driver startup (placement group, actors)",
    ),
    FrameSig("_register_to_router", Stage.STARTUP, ENGINE_PY, "SGLangEngine", "engine startup"),
    *rows(
        Stage.WEIGHT_SYNC,
        ENGINE_PY,
        "update_weights_from_disk pull_weights",
        cls="SGLangEngine",
        what="engine weight update",
    ),
    FrameSig("start_rollout_servers", Stage.STARTUP, ROLLOUT_PY, what="engine startup"),
    FrameSig("start_engines", Stage.STARTUP, ROLLOUT_PY, "ServerGroup", "engine startup"),
    FrameSig("recover", Stage.STARTUP, ROLLOUT_PY, "RolloutServer", "FT engine recovery"),
    *rows(Stage.OFFLOAD_ONLOAD, ROLLOUT_PY, "offload onload", cls="ServerGroup"),
    *rows(
        Stage.OFFLOAD_ONLOAD,
        ROLLOUT_PY,
        "offload onload onload_weights onload_kv",
        cls="RolloutServer",
    ),
    FrameSig("get_updatable_engines_and_lock", Stage.WEIGHT_SYNC, ROLLOUT_PY, "RolloutManager"),
    FrameSig("clear_updatable_num_new_engines", Stage.WEIGHT_SYNC, ROLLOUT_PY, "RolloutManager"),
    FrameSig(
        "recover_updatable_engines",
        Stage.STARTUP,
        ROLLOUT_PY,
        "RolloutManager",
        "FT engine recovery",
    ),
    FrameSig("create", Stage.STARTUP, ACTOR_GROUP, "RayTrainGroup", "train actors init"),
    FrameSig("release", Stage.TRAIN, ACTOR_GROUP, "RayTrainGroup"),
    FrameSig("_reload_rollout_weights_from_disk", Stage.WEIGHT_SYNC, ACTOR_GROUP, "RayTrainGroup"),
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
        UPDATE_WEIGHT_DIR + "update_weight_from_disk.py",
        "UpdateWeightFromDisk",
        "disk weight sync (writing the HF weights the engines reload)",
    ),
    FrameSig(
        "update_weights",
        Stage.WEIGHT_SYNC,
        UPDATE_WEIGHT_DIR + "update_weight_from_disk_delta.py",
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

# --------------------------------------------------------------------------- slime's next layout

# slime's open work (THUDM/slime@15b8e507, not in main): a named, detached ServingCluster actor
# owns the routers, engines, health monitors and the weight-update lock (slime/ray/serving.py);
# every other file is main's (the 2026-08 rows). Each row: file:line of serving.py at 15b8e507.
SERVING_PY = "slime/ray/serving.py"
NEXT_FRAMES: tuple[FrameSig, ...] = (
    # :27-51 the constructor: placement groups, `start_rollout_servers` (routers and engines),
    # waiting for the engines' init; :81 attach_training (a trainer takes the serving session),
    # :185 recover_updatable_engines (FT recovery)
    *rows(
        Stage.STARTUP,
        SERVING_PY,
        "__init__ attach_training recover_updatable_engines",
        cls="ServingCluster",
        what="serving cluster start-up",
    ),
    # :157 get_updatable_engines_and_lock, :192 clear_updatable_num_new_engines, :227 check_weights
    *rows(
        Stage.WEIGHT_SYNC,
        SERVING_PY,
        "get_updatable_engines_and_lock clear_updatable_num_new_engines check_weights",
        cls="ServingCluster",
    ),
    # :210 offload, :215 onload, :219 onload_weights, :223 onload_kv
    *rows(
        Stage.OFFLOAD_ONLOAD,
        SERVING_PY,
        "offload onload onload_weights onload_kv",
        cls="ServingCluster",
        what="engine offload/onload",
    ),
)

# --------------------------------------------------------------------------- Ray method tables

TRAIN_CLS = "MegatronTrainRayActor"

COMMON_METHODS: tuple[MethodSig, ...] = (
    *methods(TRAIN_CLS, Stage.STARTUP, "__init__ init set_rollout_manager load_other_checkpoint"),
    *methods(TRAIN_CLS, Stage.TRAIN, "train sleep wake_up clear_memory"),
    *methods(TRAIN_CLS, Stage.CHECKPOINT, "save_model"),
    *methods(TRAIN_CLS, Stage.WEIGHT_SYNC, "update_weights"),
    *methods("RolloutManager", Stage.STARTUP, "__init__ set_train_parallel_config"),
    *methods("RolloutManager", Stage.ROLLOUT_DISPATCH, "generate"),
    *methods("RolloutManager", Stage.EVAL, "eval"),
    *methods("RolloutManager", Stage.OFFLOAD_ONLOAD, "offload onload onload_weights onload_kv"),
    *methods("RolloutManager", Stage.WEIGHT_SYNC, "check_weights"),
    *methods("RolloutManager", Stage.CHECKPOINT, "save load"),
    *methods("SGLangEngine", Stage.STARTUP, "__init__ init"),
    *methods(
        "SGLangEngine",
        Stage.WEIGHT_SYNC,
        "update_weights_from_tensor init_weights_update_group destroy_weights_update_group "
        "pause_generation continue_generation post_process_weights update_weights_from_disk "
        "pull_weights check_weights",
    ),
    *methods("SGLangEngine", Stage.NCCL_BROADCAST, "update_weights_from_distributed"),
    *methods(
        "SGLangEngine", Stage.OFFLOAD_ONLOAD, "release_memory_occupation resume_memory_occupation"
    ),
    *methods("Lock", Stage.NCCL_BROADCAST, "acquire release"),
)

JAN_METHODS: tuple[MethodSig, ...] = (
    *methods(TRAIN_CLS, Stage.STARTUP, "connect_actor_critic"),
    *methods(
        "RolloutManager", Stage.WEIGHT_SYNC, "get_rollout_engines_and_lock clear_num_new_engines"
    ),
    *methods("RolloutManager", Stage.STARTUP, "recover_rollout_engines"),
    # slime's FSDP backend (9bfe152 fsdp_utils/actor.py; inherited: train_actor.py's TrainRayActor)
    *methods(FSDP_TRAIN_CLS, Stage.STARTUP, "__init__ init set_rollout_manager"),
    *methods(FSDP_TRAIN_CLS, Stage.TRAIN, "train sleep wake_up clear_memory"),
    *methods(FSDP_TRAIN_CLS, Stage.CHECKPOINT, "save_model"),
    *methods(FSDP_TRAIN_CLS, Stage.WEIGHT_SYNC, "update_weights"),
)

HEAD_METHODS: tuple[MethodSig, ...] = (
    *methods(
        "RolloutManager",
        Stage.WEIGHT_SYNC,
        "get_updatable_engines_and_lock clear_updatable_num_new_engines",
    ),
    *methods("RolloutManager", Stage.STARTUP, "recover_updatable_engines"),
)

# ServingCluster's methods, as the frame rows above (serving.py at 15b8e507)
NEXT_METHODS: tuple[MethodSig, ...] = (
    *methods("ServingCluster", Stage.STARTUP, "__init__ attach_training recover_updatable_engines"),
    *methods(
        "ServingCluster",
        Stage.WEIGHT_SYNC,
        "get_updatable_engines_and_lock clear_updatable_num_new_engines check_weights",
    ),
    *methods("ServingCluster", Stage.OFFLOAD_ONLOAD, "offload onload onload_weights onload_kv"),
)

# --------------------------------------------------------------------------- waits, plumbing, hints

RENDEZVOUS_WAITS: tuple[WaitSig, ...] = (
    WaitSig(Block.RENDEZVOUS, "init_process_group", "slime/utils/distributed_utils.py"),
)
COLLECTIVE_WAITS: tuple[WaitSig, ...] = (
    *waits(Block.COLLECTIVE, "slime/utils/reloadable_process_group.py", "new_function _fwd"),
)

# slime's timers wrap a call: never the answer to "where"
TRANSPARENT_FILES = ("slime/utils/timer.py", "slime/observability/timer.py")

# Files whose presence on a stack tells which slime layout runs (timer.py moved in 2026-08).
LAYOUT_HINT_FILES: tuple[tuple[str, str], ...] = (
    ("slime/utils/timer.py", "2026-01"),
    ("slime/backends/megatron_utils/update_weight/hf_weight_iterator_bridge.py", "2026-01"),
    ("slime/router/router.py", "2026-01"),
    ("slime/observability/", "2026-08"),
    ("slime/backends/sglang_utils/server_control.py", "2026-08"),
)

# --------------------------------------------------------------------------- frames compared elsewhere

# An asyncio loop thread (slime's AsyncLoopThread: `_start_loop` -> `run_forever`).
LOOP_THREAD_FUNCS = frozenset({"_start_loop", "run_forever"})
# The known bugs' frames (analysis/parts/known_bugs.py), each at the tree its cause names.
# PP weight-group deadlock (THUDM/slime PR #2331): the trainers connecting to the engines
PP_CONNECT_FUNCS = frozenset(
    {"connect_rollout_engines_from_distributed", "connect_rollout_engines"}
)
# rule-based math graders calling sympy with no timeout, and sympy's own files
SYMPY_GRADER_FUNCS = frozenset({"are_equal_under_sympy", "grade_answer_verl"})
SYMPY_DIR = "sympy/"
# a colocated (CUDA IPC) weight update, trainer and engine sides
COLOCATED_UPDATE_FUNCS = frozenset(
    {"_send_to_colocated_engine", sglang.UPDATE_FROM_TENSOR, "_send_hf_params"}
)
# startup waiting for the engines to become healthy
ENGINE_STARTUP_FUNCS = frozenset(
    {"_wait_server_healthy", "init_rollout_engines", "start_rollout_servers", "start_engines"}
)
# the weight broadcast: a PP source's bucket (taking the engines' Lock) and the broadcast itself
BUCKET_BROADCAST = "_update_bucket_weights_from_distributed"
WEIGHT_BROADCAST = "update_weights_from_distributed"
# process groups re-created on wake_up (colocate) or weight sync (before slime v0.3.1)
RELOAD_GROUP_FUNCS = frozenset({"reload_process_groups", "destroy_process_groups"})
WAKE_UP = "wake_up"
# Triton compiling kernels in a train rank
TRITON_DIR = "triton/"
# the context-parallel all-gather of the loss (THUDM/slime PR #2123)
CP_ALLGATHER = "_allgather_cp_redistribute"

# slime's own communication layer (`lookup.COMM_LAYERS`): the reloadable process group's wrappers
# of torch's collectives (`new_function`, `_fwd`)
COMM_LAYERS: tuple[tuple[str, str], ...] = ((ANY, "slime/utils/reloadable_process_group.py"),)

# the engine's pause call, whose HTTP call an orphaned pause never ends (sglang#33696):
# SGLangEngine.pause_generation (sglang_engine.py:423 at 624b824)
PAUSE_CALLERS = frozenset({"pause_generation"})

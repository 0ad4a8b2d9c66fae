"""Command-line arguments of the demo job: a small subset of slime's, plus the demo's fault knobs."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

_DEFAULTS: dict[str, object] = {
    "sglang_step_s": 0.02,
    "rollout_max_response_len": 16,
    "train_backend": "megatron",
    "rollout_max_retries": 60,
    "update_weight_buffer_size": 16 * 1024,
    "vocab_size": 256,
    "rollout_health_check_interval": 30.0,
    "rollout_health_check_timeout": 30.0,
    "update_weight_transport": "nccl",
}
# SGLang ServerArgs fields the stand-in engine takes, given to the job as --sglang-<field>
SERVER_PASSTHROUGH = (
    "admin_api_key",
    "hicache_storage_backend_extra_config",
    "model_loader_extra_config",
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="slime-shaped demo job (CPU, Ray, SGLang stand-in)")
    # topology
    p.add_argument("--actor-num-nodes", type=int, default=1)
    p.add_argument("--actor-num-gpus-per-node", type=int, default=2)
    p.add_argument("--rollout-num-gpus", type=int, default=2)
    p.add_argument("--rollout-num-gpus-per-engine", type=int, default=1)
    p.add_argument("--num-gpus-per-node", type=int, default=2)
    p.add_argument("--colocate", action="store_true")
    # THUDM/slime PR#2015 (open): offload pauses generation before it releases engine memory
    p.add_argument("--offload-pause-generation", action="store_true")
    p.add_argument(
        "--actor-node-resource",
        default=None,
        help="custom Ray resource that pins train bundles to a node",
    )
    p.add_argument(
        "--rollout-node-resource",
        default=None,
        help="custom Ray resource that pins engine bundles to a node; several, comma-separated: "
        "the engines' GPUs node by node (--num-gpus-per-node each) on each in turn",
    )
    p.add_argument("--sglang-host", default="127.0.0.1")
    p.add_argument("--sglang-base-port", type=int, default=15000)
    p.add_argument("--sglang-api-key", default=None)
    # More of SGLang's ServerArgs, under slime's --sglang- prefix, passed on to each engine
    for field in SERVER_PASSTHROUGH:
        p.add_argument(f"--sglang-{field.replace('_', '-')}", default=None)
    p.add_argument("--sglang-request-log-dir", default=None)
    # The router, as slime's add_sglang_router_arguments (slime main 624b824,
    # slime/backends/sglang_utils/arguments.py:12-37): no IP or port given -> the RolloutManager
    # starts sgl-router itself (`_start_router`); every RouterArgs field under --router-*.
    p.add_argument("--sglang-router-ip", default=None)
    p.add_argument("--sglang-router-port", type=int, default=None)
    p.add_argument("--sglang-router-request-timeout-secs", type=int, default=14400)
    from sglang_router.launch_router import RouterArgs  # type: ignore[import-untyped]

    RouterArgs.add_cli_args(p, use_router_prefix=True, exclude_host_port=True)
    p.set_defaults(router_log_level="warn")
    p.add_argument("--sglang-server-concurrency", type=int, default=16)
    # How often one rollout request is retried, 1 s apart, before the rollout fails: slime's
    # `post(..., max_retries=60)` (a demo knob: `engine_server_killed` retries for as long as it
    # runs, so that a doctor run never races the job's failure)
    p.add_argument("--rollout-max-retries", type=int, default=60)
    p.add_argument(
        "--sglang-step-s", type=float, default=0.02, help="stand-in seconds per forward step"
    )
    # W&B, as slime's (slime/utils/arguments.py): the job logs in with the key
    p.add_argument("--wandb-key", default=None)
    p.add_argument("--wandb-host", default=None)
    # loop
    p.add_argument("--start-rollout-id", type=int, default=0)
    p.add_argument("--num-rollout", type=int, default=100000)
    p.add_argument("--rollout-batch-size", type=int, default=4)
    p.add_argument("--n-samples-per-prompt", type=int, default=2)
    p.add_argument("--global-batch-size", type=int, default=8)
    p.add_argument("--rollout-max-response-len", type=int, default=16)
    p.add_argument("--rollout-temperature", type=float, default=1.0)
    p.add_argument("--eval-interval", type=int, default=None)
    p.add_argument("--n-samples-per-eval-prompt", type=int, default=1)
    p.add_argument("--skip-eval-before-train", action="store_true")
    p.add_argument("--rm-type", default="math")
    p.add_argument("--rm-url", default=None)
    p.add_argument("--update-weight-buffer-size", type=int, default=16 * 1024)
    p.add_argument("--vocab-size", type=int, default=256)  # Megatron's: rows of embed / lm_head
    p.add_argument("--distributed-timeout-minutes", type=int, default=60)
    p.add_argument("--train-step-seconds", type=float, default=0.3)
    # training backend and user-plugged hooks, as slime's
    p.add_argument("--train-backend", choices=("megatron", "fsdp"), default="megatron")
    p.add_argument("--custom-loss-function-path", default=None)
    # fault tolerance, as slime's: the RolloutManager's health monitor of the engines
    p.add_argument("--use-fault-tolerance", action="store_true")
    p.add_argument("--rollout-health-check-interval", type=float, default=30.0)
    p.add_argument("--rollout-health-check-timeout", type=float, default=30.0)
    p.add_argument("--rollout-health-check-first-wait", type=float, default=0)
    p.add_argument("--custom-convert-samples-to-train-data-path", default=None)
    # miles's session server (miles/utils/arguments.py @31f1ca961): the rollout's requests go
    # through it (rollout -> session server -> router -> engines); slime has none
    p.add_argument("--use-session-server", action="store_true")
    p.add_argument("--session-server-ip", default=None)
    p.add_argument("--session-server-port", type=int, default=None)
    # slime's hook for a reward function of the user's (`await rm_function(args, sample)`)
    p.add_argument("--custom-rm-path", default=None)
    # the demo reward plugin's pool (user_plugins/math_verify_pool.py): process or thread
    p.add_argument("--reward-pool", choices=("process", "thread"), default="process")
    # train_async.py: weight updates every N rollouts (slime's --update-weights-interval)
    p.add_argument("--update-weights-interval", type=int, default=1)
    # a rollout gate of a fork (as NeMo-RL's max_trajectory_age_steps or miles's
    # --max-weight-staleness): generate(r) waits until the engines serve weights at most this many
    # versions older than rollout r's; None: no gate (slime)
    p.add_argument("--max-weight-staleness", type=int, default=None)
    # weight sync, as slime main's (slime/utils/arguments.py:124-171 @624b824): "disk" writes an HF
    # checkpoint per sync under --update-weight-disk-dir and the engines reload it
    p.add_argument("--update-weight-transport", choices=("nccl", "disk"), default="nccl")
    p.add_argument("--update-weight-disk-dir", default=None)
    p.add_argument("--update-weight-disk-keep-files", action="store_true")
    # the checkpoint the engines serve (the stand-in's --model-path)
    p.add_argument("--hf-checkpoint", default="demo/model")
    # checkpointing, as slime's (Megatron's --save, slime's --save-interval)
    p.add_argument("--save", default=None)
    p.add_argument("--save-interval", type=int, default=None)
    # demo faults
    # demo: slime's next layout, a detached ServingCluster actor starts the routers and engines
    # (slime/ray/serving.py; demo/launch.py's layout `slime-next` gives it)
    p.add_argument("--serving-cluster", action="store_true")
    p.add_argument("--fault", default="none")
    p.add_argument("--fault-after-steps", type=int, default=0)
    p.add_argument(
        "--fault-engine", type=int, default=1, help="engine index a server fault targets"
    )
    p.add_argument("--fault-rank", type=int, default=1, help="train rank a train fault targets")
    p.add_argument("--fault-timed-delay-s", type=float, default=12.0)
    p.add_argument("--fault-timed-step-s", type=float, default=2.0)
    args = p.parse_args(argv)
    finalize_args(args)
    return args


# What each demo fault needs from the job's configuration (applied unless set explicitly).
FAULT_SETTINGS: dict[str, dict[str, object]] = {
    "slow": {"sglang_step_s": 0.25, "rollout_max_response_len": 48},
    "disk_weight_sync": {"update_weight_transport": "disk"},
    # miles PR#1602: the rollout through miles's session server, slow decoding (a long trajectory
    # decodes for minutes at the armed rollout)
    "rollout_session_server_blocked": {"use_session_server": True, "sglang_step_s": 0.25},
    # the disk sync of a model whose checkpoint (64 MiB: the embedding as a real vocabulary makes
    # it) takes minutes to read from engine 1's host's slow storage (user_plugins/slow_storage.py)
    "weight_load_slow_storage": {"update_weight_transport": "disk", "vocab_size": 1 << 18},
    "offload_hang": {"colocate": True},
    "colocate_update_hang": {"colocate": True},
    "startup_engine_warmup_stuck_colocate": {"colocate": True},
    # one bucket of several tensors, the first (the embedding, 32 MiB as a real vocabulary makes it)
    # larger than a loopback socket holds: rank 0's gloo send of it to the wedged engine never
    # completes, so the healthy engine gets that tensor and waits on the next one's handle, as an
    # engine in a stuck NCCL broadcast does
    "weight_sync_engine_wedged": {"update_weight_buffer_size": 1 << 27, "vocab_size": 1 << 18},
    # the same wedged broadcast, in a job run with --use-fault-tolerance: the health monitor checks
    # every second and waits longer than a doctor run for an answer
    "weight_sync_health_check_queued": {
        "update_weight_buffer_size": 1 << 27,
        "vocab_size": 1 << 18,
        "use_fault_tolerance": True,
        "rollout_health_check_interval": 1.0,
        "rollout_health_check_timeout": 600.0,
    },
    "eval_hang": {"eval_interval": 1, "skip_eval_before_train": True},
    # earlier rollouts finish first: Ray's task history compares the stuck one with them
    "rollout_slots_leaked": {"fault_after_steps": 3},
    # slime's FSDP backend with a user's loss that never returns on a batch without tokens
    "train_custom_loss_stuck": {
        "train_backend": "fsdp",
        "custom_loss_function_path": "user_plugins.token_mean_loss.token_mean_loss",
    },
    # a user's conversion of samples to train data that packs each DP shard in a Ray task
    "rollout_data_plasma_full": {
        "custom_convert_samples_to_train_data_path": (
            "user_plugins.packed_train_data.convert_samples_to_train_data"
        ),
    },
    # a save after every step, under the job's working directory (a disk-backed folder)
    "checkpoint_slow_storage": {"save": "checkpoints", "save_interval": 1},
    "engine_server_killed": {"rollout_max_retries": 1_000_000},
    "rollout_tp_rank_killed": {"rollout_max_retries": 1_000_000},
    "router_worker_removed": {"rollout_max_retries": 1_000_000},
    "router_killed": {"rollout_max_retries": 1_000_000},
    "checkpoint_stuck_storage": {"save": "checkpoints", "save_interval": 1},
    "checkpoint_writer_deadlock": {"save": "checkpoints", "save_interval": 1},
    "checkpoint_plan_gather_stuck": {"save": "checkpoints", "save_interval": 1},
    # a user's reward that grades in a pool of workers off the rollout's event loop
    "reward_verifier_pool_stuck": {
        "custom_rm_path": "user_plugins.math_verify_pool.math_verify_reward",
    },
    # train_async.py with slime main's fault tolerance (rank 0 recovers the engines first) and a
    # fork's rollout gate that wants the newest weights
    "update_waits_behind_rollout_gate": {"use_fault_tolerance": True, "max_weight_staleness": 0},
    # --- issue 45 item 5 (the newer public cases)
    # slime's FSDP backend with micro-batch counts that are not reduced over the DP group
    "train_fsdp_microbatch_diverged": {"train_backend": "fsdp"},
    # colocate with slime PR#2015's offload: a pause before the engines release their memory
    "offload_pause_stuck": {"colocate": True, "offload_pause_generation": True},
}


def finalize_args(args: argparse.Namespace) -> None:
    """Derived settings, as slime's `slime_validate_args` does for the real ones."""
    for key, value in FAULT_SETTINGS.get(args.fault, {}).items():
        if key == "colocate" or getattr(args, key) in (None, False, _DEFAULTS.get(key)):
            setattr(args, key, value)
    if args.update_weight_transport == "disk" and args.update_weight_disk_dir is None:
        # under the driver's working directory: one node, or a filesystem every node shares
        args.update_weight_disk_dir = os.path.abspath("weight_sync")
    args.update_weight_mode = "full"
    args.offload_rollout = bool(args.colocate)
    args.offload_train = bool(args.colocate)
    args.world_size = args.actor_num_nodes * args.actor_num_gpus_per_node
    if args.colocate:
        args.rollout_num_gpus = args.world_size
    args.num_engines = args.rollout_num_gpus // min(
        args.rollout_num_gpus_per_engine, args.num_gpus_per_node
    )
    if args.sglang_api_key and args.router_api_key is None:
        # engines with an API key: the router sends its key to them and asks it of its own
        # callers (POST /workers too); a slime user gives --router-api-key alongside
        args.router_api_key = args.sglang_api_key
    args.slow_storage = False  # the demo's slow storage (checkpoint_slow_storage), set when armed
    args.stuck_storage = False  # the demo's stuck storage (checkpoint_stuck_storage), when armed
    args.writer_deadlock = (
        False  # the demo's forked writer (checkpoint_writer_deadlock), when armed
    )
    args.async_save = False  # `--async-save`: dist_checkpointing's planned save (when armed)
    args.plan_coordinator_mismatch = False  # checkpoint_plan_gather_stuck, when armed

"""The demo job's injectable faults: what each one does and the verdict it should earn.

The expected verdict uses the string values of `slime_hangdoctor.verdict` (`Status`, `Stage`,
`Role`) so that this module stays standalone (demo/ imports nothing of ours outside demo/); tests
compare with e.g. `Stage(spec.expected.stage)`.

`frames` lists, per key process, function names that a `py-spy dump` of that process shows while
the fault holds, innermost first, as a subsequence of one thread's stack (other frames may sit in
between). Process labels: "driver", "rollout_manager", "train rank N", "engine N actor" (the
SGLangEngine Ray actor), "engine N server" (its HTTP child), "engine N scheduler", "router" (the
sgl-router process the RolloutManager forks in its constructor, as slime's `_start_router`),
"rollout_manager child N" (a later child of the RolloutManager, e.g. a process pool's worker),
"engine N detokenizer" (its `sglang::detokenizer`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Expected:
    status: str  # verdict.Status value: "hung" | "progressing"
    stage: str  # verdict.Stage value
    culprit_role: str | None = None  # verdict.Role value
    culprit_rank: int | None = None  # train rank, for culprit_role "train_rank"
    culprit_engine: int | None = None  # engine index (0-based), for culprit_role "sglang_engine"
    # engines blamed together (a wait-for cycle has no single culprit): every one of them, no other
    culprit_engines: tuple[int, ...] = ()
    # a hang where no process stands out (every rank waits alike): the verdict names no culprit
    no_culprit: bool = False


@dataclass(frozen=True)
class FrameSignature:
    process: str  # a process label, see the module docstring
    frames: tuple[str, ...]  # innermost first; a subsequence of one thread's frames
    thread: str | None = None  # thread name, when not the main thread


@dataclass(frozen=True)
class FaultSpec:
    name: str
    description: str
    expected: Expected
    colocate: bool = False
    uses_fault_after_steps: bool = True  # False: the fault is there from the start
    server_fault: str | None = None  # the SGLang stand-in fault it uses, if any
    # the job's rewards come from a remote reward model outside the job (`--rm-type remote_rm
    # --rm-url`, a free port the launcher picks)
    remote_reward: bool = False
    # the head's object store (`ray start --object-store-memory`, MiB) that the fault needs; None:
    # Ray's default. A head shared with other faults has the default: such a fault gets its own.
    object_store_mib: int | None = None
    frames: tuple[FrameSignature, ...] = field(default_factory=tuple)
    # TP ranks per engine (slime's --rollout-num-gpus-per-engine): each engine then runs that many
    # `sglang::scheduler_TP<r>` processes ("engine N scheduler" is rank 0's, "engine N scheduler
    # TPr" rank r's)
    tp_size: int = 1
    # False: the fault's engine never listens (a start-up fault is then ready once its engines
    # are launched, without a connect)
    engine_listens: bool = True
    # where the doctor does not reach `expected` yet: what it says instead (tests mark it xfail)
    known_gap: str | None = None
    # the driver script the job runs (slime's train.py, or its asynchronous train_async.py)
    entrypoint: str = "train.py"
    # the job layout the fault needs (demo/launch.py JOB_LAYOUTS): None runs on any. "miles":
    # miles main's weight-update session; "slime-next": slime's ServingCluster actor
    layout: str | None = None


FAULT_ENGINE = 1  # engine index a server fault targets
FAULT_RANK = 1  # train rank a train fault targets

_WARMUP_STUCK_FRAMES = (
    FrameSignature("driver", ("create_rollout_manager", "train")),
    FrameSignature("rollout_manager", ("get", "__init__")),
    FrameSignature(
        "engine 1 actor", ("_wait_server_healthy", "launch_server_process", "_init_normal", "init")
    ),
    FrameSignature("engine 1 scheduler", ("forward_extend", "event_loop_normal")),
)

FAULTS: dict[str, FaultSpec] = {
    spec.name: spec
    for spec in (
        FaultSpec(
            name="none",
            description="healthy: steps keep advancing (~1-3 s each)",
            expected=Expected(status="progressing", stage="none"),
            uses_fault_after_steps=False,
        ),
        FaultSpec(
            name="slow",
            description="healthy but slow: long generations (~15 s per rollout), tokens keep flowing",
            expected=Expected(status="progressing", stage="none"),
            uses_fault_after_steps=False,
        ),
        FaultSpec(
            name="disk_weight_sync",
            description=(
                "healthy, with slime main's disk weight sync (--update-weight-transport disk): "
                "each update writes an HF checkpoint (save_hf_model_to_path) and the engines "
                "reload it (/update_weights_from_disk); steps keep advancing"
            ),
            expected=Expected(status="progressing", stage="none"),
            uses_fault_after_steps=False,
        ),
        FaultSpec(
            name="weight_load_slow_storage",
            description=(
                "healthy but slow (issue 34 items 1 and 3): slime main's disk weight sync, and "
                "engine 1's host reads the checkpoint from slow shared storage (the demo's storage "
                "daemon serves the weight file at 512 KiB/s through a FIFO, as a FUSE mount's "
                "daemon would): engine 1's scheduler waits in each read while its read counters "
                "rise; engine 0 has finished its load and stays paused until the driver's "
                "continue_generation, which comes after engine 1's load"
            ),
            expected=Expected(status="progressing", stage="none"),
            server_fault="slow_weight_storage",
            frames=(
                FrameSignature(
                    "driver", ("_reload_rollout_weights_from_disk", "update_weights", "train")
                ),
                FrameSignature("engine 1 actor", ("_make_request", "update_weights_from_disk")),
                FrameSignature(
                    "engine 1 scheduler",
                    (
                        "weights_iterator",
                        "load_file_digests",
                        "load_weights_and_postprocess",
                        "model_load_weights",
                        "update_weights_from_disk",
                    ),
                ),
            ),
        ),
        FaultSpec(
            name="rollout_session_server_blocked",
            description=(
                "miles PR#1602 (issue 34 item 2): the rollout's requests go through miles's "
                "session server (--use-session-server: rollout -> session server -> router -> "
                "engines). At the armed rollout every other trajectory is long and the others end "
                "at once; each finished session's records (R3 replay) are rendered by one "
                "synchronous json.dumps on the server's only event loop, and the rollout's "
                "client retries each fetch after 2 s: the renders follow one another, new sessions "
                "and fetches pile up unaccepted, while the engines still decode the long ones"
            ),
            expected=Expected(status="hung", stage="rollout_dispatch", culprit_role="router"),
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature("rollout_manager", ("run", "generate_rollout", "generate")),
                FrameSignature(
                    "session server", ("_render_json", "get_session", "route", "handle")
                ),
            ),
        ),
        FaultSpec(
            name="startup_engine_never_healthy",
            description="engine 1's server never turns healthy (503): the job never leaves start-up",
            expected=Expected(
                status="hung",
                stage="startup",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            uses_fault_after_steps=False,
            server_fault="never_healthy",
            frames=(
                FrameSignature("driver", ("create_rollout_manager", "train")),
                FrameSignature("rollout_manager", ("get", "__init__")),
                FrameSignature(
                    "engine 1 actor",
                    ("_wait_server_healthy", "launch_server_process", "_init_normal", "init"),
                ),
            ),
        ),
        FaultSpec(
            name="startup_engine_warmup_stuck",
            description=(
                "engine 1's server is up but its first forward (the /health_generate warm-up) "
                "never returns: its actor waits in _wait_server_healthy, the RolloutManager is "
                "still being constructed"
            ),
            expected=Expected(
                status="hung",
                stage="startup",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            uses_fault_after_steps=False,
            server_fault="stuck_prefill",
            frames=_WARMUP_STUCK_FRAMES,
        ),
        FaultSpec(
            name="startup_engine_warmup_stuck_colocate",
            description="colocate: as startup_engine_warmup_stuck",
            expected=Expected(
                status="hung",
                stage="startup",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            colocate=True,
            uses_fault_after_steps=False,
            server_fault="stuck_prefill",
            frames=_WARMUP_STUCK_FRAMES,
        ),
        FaultSpec(
            name="rollout_engine_stuck",
            description="engine 1's scheduler gets stuck in a decode step during the rollout",
            expected=Expected(
                status="hung",
                stage="rollout_dispatch",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            server_fault="stuck_scheduler",
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature(
                    "rollout_manager",
                    ("run", "generate_rollout", "call_rollout_fn", "_get_rollout_data", "generate"),
                ),
                FrameSignature("engine 1 scheduler", ("forward_decode", "event_loop_normal")),
                FrameSignature("engine 1 server", ("generate_request", "ep_generate")),
            ),
        ),
        FaultSpec(
            name="reward_hang",
            description="the math reward (sympy) spins forever on the rollout's event-loop thread",
            expected=Expected(status="hung", stage="reward", culprit_role="rollout_manager"),
            frames=(
                FrameSignature(
                    "rollout_manager",
                    ("are_equal_under_sympy", "grade_answer_verl", "async_rm", "generate_and_rm"),
                    thread="_start_loop",
                ),
                FrameSignature("rollout_manager", ("run", "generate_rollout", "generate")),
            ),
        ),
        FaultSpec(
            name="offload_hang",
            description="colocate: engine 1's release_memory_occupation never returns",
            expected=Expected(
                status="hung",
                stage="offload_onload",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            colocate=True,
            server_fault="hang_release_memory_occupation",
            frames=(
                FrameSignature("rollout_manager", ("offload",)),
                FrameSignature("engine 1 actor", ("_make_request", "release_memory_occupation")),
            ),
        ),
        FaultSpec(
            name="train_rank_stuck",
            description="train rank 1 spins in process_rollout_data; rank 0 waits in all_reduce",
            expected=Expected(
                status="hung", stage="train", culprit_role="train_rank", culprit_rank=FAULT_RANK
            ),
            frames=(
                FrameSignature(
                    "train rank 1",
                    ("_repack_partition", "process_rollout_data", "_get_rollout_data", "train"),
                ),
                FrameSignature(
                    "train rank 0",
                    ("all_reduce", "train_one_step", "train", "train_actor", "train"),
                ),
            ),
        ),
        FaultSpec(
            name="train_rank_extra_step",
            description=(
                "the rollout's DP schedule gives train rank 1 one more training step than its "
                "peer (slime's schedule keeps every DP rank at the same number of steps and "
                "micro-batches, utils/dp_schedule.py; a split that packs each rank's samples on "
                "its own breaks that): rank 0 finishes train and its Ray worker sits idle, rank 1 "
                "waits in the extra step's all_reduce, which rank 0 will never enter"
            ),
            expected=Expected(
                status="hung", stage="train", culprit_role="train_rank", culprit_rank=FAULT_RANK
            ),
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature(
                    "train rank 1",
                    ("all_reduce", "train_one_step", "train", "train_actor", "train"),
                ),
                FrameSignature("train rank 0", ("main_loop",)),
            ),
        ),
        FaultSpec(
            name="reward_verifier_pool_stuck",
            description=(
                "a user's reward (--custom-rm-path) grades each answer with slime's math grader in "
                "a ProcessPoolExecutor off the rollout's event loop, with no timeout (AReaL#1426, "
                "verl#5839; verl PR#5635 turned math_verify's timeouts off off the main thread): "
                "one pathological answer keeps its pool worker, a forked child of the "
                "RolloutManager, in sympy for ever; the rollout awaits its reward, every engine "
                "is idle (`--reward-pool thread`: the same in a ThreadPoolExecutor)"
            ),
            expected=Expected(status="hung", stage="reward", culprit_role="rollout_manager"),
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature("rollout_manager", ("run", "generate_rollout", "generate")),
                FrameSignature(
                    "rollout_manager child 1",
                    ("are_equal_under_sympy", "grade_answer_verl", "verify", "_process_worker"),
                ),
            ),
        ),
        FaultSpec(
            name="update_waits_behind_rollout_gate",
            description=(
                "slime's train_async.py in a fork that leaves out the sync of the pending generate "
                "before each weight update, with a rollout gate that wants the newest weights "
                "(--max-weight-staleness 0; NeMo-RL#2694's trainer and collector): generate(1) "
                "waits for weight version 2 in the RolloutManager, which only the next update "
                "brings; that update's rank 0 waits for its recover_updatable_engines, queued on "
                "the RolloutManager behind generate (--use-fault-tolerance, slime main's path), "
                "rank 1 for rank 0 in the update's gloo barrier: a mutual wait with no HTTP in "
                "it, every actor alive, every engine idle"
            ),
            expected=Expected(status="hung", stage="weight_sync", culprit_role="rollout_manager"),
            entrypoint="train_async.py",
            frames=(
                FrameSignature("driver", ("update_weights", "train")),
                FrameSignature(
                    "rollout_manager", ("wait_for", "_wait_for_weight_version", "generate")
                ),
                FrameSignature("train rank 0", ("get", "update_weights")),
                FrameSignature("train rank 1", ("barrier", "update_weights")),
            ),
        ),
        FaultSpec(
            name="colocate_update_hang",
            description="colocate: engine 1's update_weights_from_tensor never returns",
            expected=Expected(
                status="hung",
                stage="weight_sync",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            colocate=True,
            server_fault="hang_update_weights_from_tensor",
            frames=(
                FrameSignature("driver", ("update_weights", "train")),
                FrameSignature("train rank 1", ("get", "update_weights", "update_weights")),
                FrameSignature("train rank 0", ("barrier", "update_weights", "update_weights")),
                FrameSignature("engine 1 actor", ("_make_request", "update_weights_from_tensor")),
                FrameSignature(
                    "engine 1 scheduler", ("_barrier_tp_cpu_group", "update_weights_from_tensor")
                ),
            ),
        ),
        FaultSpec(
            name="weight_sync_engine_missing",
            description=(
                "non-colocate: engine 1 never enters the weight broadcast; train rank 0 waits in "
                "dist.broadcast"
            ),
            expected=Expected(
                status="hung",
                stage="nccl_broadcast",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            server_fault="skip_weight_sync",
            frames=(
                FrameSignature("driver", ("update_weights", "train")),
                FrameSignature(
                    "train rank 0",
                    (
                        "broadcast",
                        "update_weights_from_distributed",
                        "_update_bucket_weights_from_distributed",
                        "update_weights",
                    ),
                ),
                FrameSignature("train rank 1", ("barrier", "update_weights")),
                FrameSignature(
                    "engine 1 actor", ("_make_request", "update_weights_from_distributed")
                ),
                FrameSignature(
                    "engine 1 scheduler", ("_wait_for_weights", "update_weights_from_distributed")
                ),
            ),
        ),
        FaultSpec(
            name="weight_sync_engine_wedged",
            description=(
                "non-colocate: engine 1's scheduler wedges after the weight update reached it, "
                "before the first broadcast; train rank 0 waits in the broadcast of the bucket's "
                "first tensor (32 MiB, more than a socket holds, so its gloo send to engine 1 never "
                "completes) and engine 0's scheduler, which got it, waits on the next tensor's "
                "handle (`handle.wait()` in update_weights_from_distributed, no broadcast frame), "
                "as on NCCL"
            ),
            expected=Expected(
                status="hung",
                stage="nccl_broadcast",
                culprit_role="sglang_engine",
                culprit_engines=(FAULT_ENGINE,),  # alone: the engine in the broadcast is none
            ),
            server_fault="stuck_before_weight_broadcast",
            frames=(
                FrameSignature("driver", ("update_weights", "train")),
                FrameSignature("train rank 0", ("broadcast", "update_weights_from_distributed")),
                FrameSignature(
                    "engine 1 scheduler", ("_synchronize", "update_weights_from_distributed")
                ),
                FrameSignature(
                    "engine 0 scheduler",
                    ("update_weights_from_distributed", "update_weights_from_distributed"),
                ),
            ),
        ),
        FaultSpec(
            name="weight_sync_health_check_queued",
            description=(
                "weight_sync_engine_wedged in a job run with --use-fault-tolerance whose "
                "weight updater resumes the health monitors as soon as it has posted the update "
                "(slime pauses them in RolloutManager.recover_updatable_engines and resumes them "
                "with the next generate; a fork that resumes them early): the RolloutManager's "
                "RolloutHealthMonitor thread calls each engine actor's health_generate every "
                "second; each engine actor runs update_weights_from_distributed, blocked in the "
                "weight broadcast, so the health check queues behind it on the actor "
                "(open-instruct PR#1454's shape). A fork that never pauses them lets a check "
                "reach an engine between pause_generation and the update: SGLang fails it after "
                "20 s and the monitor kills the engine (a CI run showed that race)"
            ),
            expected=Expected(
                status="hung",
                stage="nccl_broadcast",
                culprit_role="sglang_engine",
                culprit_engines=(FAULT_ENGINE,),
            ),
            server_fault="stuck_before_weight_broadcast",
            frames=(
                FrameSignature("driver", ("update_weights", "train")),
                FrameSignature("train rank 0", ("broadcast", "update_weights_from_distributed")),
                FrameSignature(
                    "rollout_manager",
                    ("get", "_check_engine_health", "_run_health_checks"),
                    thread="RolloutHealthMonitor",
                ),
            ),
        ),
        FaultSpec(
            name="eval_hang",
            description="engine 1's scheduler gets stuck in a decode step during eval",
            expected=Expected(
                status="hung",
                stage="eval",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            server_fault="stuck_scheduler",
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature(
                    "rollout_manager", ("run", "generate_rollout", "call_rollout_fn", "eval")
                ),
                FrameSignature("engine 1 scheduler", ("forward_decode", "event_loop_normal")),
            ),
        ),
        FaultSpec(
            name="actor_queue_cycle",
            description=(
                "non-colocate, PP>1 (slime PR#2331): two PP sources create their slime-pp groups "
                "at once; each engine actor joins one group with a blocking call and the other "
                "group's call waits in its method queue"
            ),
            expected=Expected(
                status="hung",
                stage="weight_sync",
                culprit_role="sglang_engine",
                culprit_engines=(0, 1),
            ),
            uses_fault_after_steps=False,
            frames=(
                FrameSignature("driver", ("update_weights", "train")),
                FrameSignature(
                    "train rank 0",
                    ("connect_rollout_engines_pp_concurrently", "connect_rollout_engines"),
                ),
                FrameSignature("engine 0 actor", ("_make_request", "init_weights_update_group")),
                FrameSignature("engine 1 actor", ("_make_request", "init_weights_update_group")),
            ),
        ),
        FaultSpec(
            name="placement_infeasible",
            description=(
                "start-up on a too small cluster (OpenRLHF#865): the job's PACK placement group "
                "asks for one GPU per bundle and the cluster has fewer; pg.ready() never returns"
            ),
            expected=Expected(status="hung", stage="startup", culprit_role="driver"),
            uses_fault_after_steps=False,
            frames=(
                FrameSignature(
                    "driver", ("_create_placement_group", "create_placement_groups", "train")
                ),
            ),
        ),
        FaultSpec(
            name="rollout_data_plasma_full",
            description=(
                "ray-project/ray#62093: a user's --custom-convert-samples-to-train-data-path packs "
                "the rollout batch in a Ray task that waits on one Ray task per DP shard; the "
                "batch it pins as a granted lease's argument leaves no room under Ray's "
                "task-argument limit (70 % of a small object store): the shard's task never "
                "starts and RolloutManager.generate waits"
            ),
            expected=Expected(
                status="hung", stage="rollout_dispatch", culprit_role="rollout_manager"
            ),
            uses_fault_after_steps=False,
            object_store_mib=128,
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature(
                    "rollout_manager",
                    ("convert_samples_to_train_data", "_convert_samples_to_train_data", "generate"),
                ),
            ),
        ),
        FaultSpec(
            name="engine_paused_by_update",
            description=(
                "engine 1 pauses generation again right after a weight update and nothing "
                "continues it (AReaL#1160): the next rollout's requests wait at its pause gate, "
                "outside its scheduler"
            ),
            expected=Expected(
                status="hung",
                stage="rollout_dispatch",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            server_fault="stay_paused_after_update",
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature("rollout_manager", ("run", "generate_rollout", "generate")),
                FrameSignature("engine 1 server", ("_pass_pause_gate", "generate_request")),
            ),
        ),
        FaultSpec(
            name="rollout_behind_proxy",
            description=(
                "the RolloutManager runs with the master node's http_proxy (slime#1026), a proxy "
                "that accepts and never answers, and a no_proxy that names localhost but not the "
                "engines' address: the first rollout's requests wait at the proxy, every engine "
                "is idle"
            ),
            expected=Expected(
                status="hung", stage="rollout_dispatch", culprit_role="rollout_manager"
            ),
            uses_fault_after_steps=False,
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature("rollout_manager", ("run", "generate_rollout", "generate")),
            ),
        ),
        FaultSpec(
            name="reward_service_stuck",
            description=(
                "the rewards come from a remote reward model outside the job (`--rm-type "
                "remote_rm --rm-url`, as slime's remote_rm posts each sample); after the healthy "
                "rollouts the service accepts and reads every request and never answers: the "
                "engines have finished their share, every stack is idle, only the "
                "RolloutManager's connections to the service show where the rollout waits"
            ),
            expected=Expected(status="hung", stage="reward", culprit_role="rollout_manager"),
            remote_reward=True,
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature("rollout_manager", ("run", "generate_rollout", "generate")),
            ),
        ),
        FaultSpec(
            name="rollout_slots_leaked",
            description=(
                "the rollout's concurrency slots leak (a custom rollout's abort path takes them "
                "from GenerateState's semaphore and never gives them back): after three healthy "
                "rollouts every generate_and_rm waits for a slot forever, no request reaches an "
                "engine, and no connection is open to any"
            ),
            expected=Expected(
                status="hung", stage="rollout_dispatch", culprit_role="rollout_manager"
            ),
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature("rollout_manager", ("run", "generate_rollout", "generate")),
            ),
        ),
        FaultSpec(
            name="checkpoint_slow_storage",
            description=(
                "slime's save_model after a train step writes the checkpoint to slow storage "
                "(verl#2238: 22-36 min per save): train rank 0 writes the whole torch_dist "
                "checkpoint in small fsync'd blocks, each acknowledged after a pause, while rank "
                "1 waits in save_checkpoint's barrier. Both stack samples look the same; only "
                "the kernel source's /proc/<pid>/io write bytes show the save moving"
            ),
            expected=Expected(status="progressing", stage="none"),
            frames=(
                FrameSignature("driver", ("save_model", "train")),
                FrameSignature(
                    "train rank 0",
                    ("_write_block", "_write_shard_to_slow_storage", "save_checkpoint", "save"),
                ),
                FrameSignature("train rank 1", ("barrier", "save_checkpoint", "save")),
            ),
        ),
        FaultSpec(
            name="checkpoint_stuck_storage",
            description=(
                "slime's save_model after a train step streams rank 0's checkpoint to an uploader "
                "(as into `aws s3 cp - URL`) that stopped reading: the write sleeps in the kernel "
                "(pipe_write) with no byte moving, while rank 1 waits in save_checkpoint's "
                "barrier. The stacks alone read as a collective mismatch of the save (slime#1908, "
                "verl#2238); the kernel source's wchan and flat /proc/<pid>/io say stuck storage"
            ),
            expected=Expected(
                status="hung", stage="checkpoint", culprit_role="train_rank", culprit_rank=0
            ),
            frames=(
                FrameSignature("driver", ("save_model", "train")),
                FrameSignature(
                    "train rank 0", ("_stream_shard_to_uploader", "save_checkpoint", "save")
                ),
                FrameSignature("train rank 1", ("barrier", "save_checkpoint", "save")),
            ),
        ),
        FaultSpec(
            name="checkpoint_writer_deadlock",
            description=(
                "slime's save_model after a train step hands rank 0's checkpoint to an "
                "asynchronous writer process forked from the rank (multiprocessing, fork) while "
                "another thread of the rank holds the writer's lock: the child inherits the lock "
                "held and waits on it forever, rank 0 waits for its writer in join, rank 1 in "
                "save_checkpoint's barrier. The child keeps the rank's Ray process title "
                "(ray::MegatronTrainRayActor.save_model) and environment: it is rank 0's child, "
                "not a third rank"
            ),
            expected=Expected(
                status="hung", stage="checkpoint", culprit_role="train_rank", culprit_rank=0
            ),
            frames=(
                FrameSignature("driver", ("save_model", "train")),
                FrameSignature(
                    "train rank 0", ("join", "_save_shard_in_forked_writer", "save_checkpoint")
                ),
                FrameSignature("train rank 1", ("barrier", "save_checkpoint", "save")),
            ),
        ),
        FaultSpec(
            name="checkpoint_plan_gather_stuck",
            description=(
                "slime's save_model after a train step with --async-save: Megatron's "
                "save_state_dict_async_plan gathers every rank's local save plan on a coordinator "
                "(torch DCP's _DistWrapper.gather_object). Each rank is given its own coordinator "
                "(as a save group whose layout differs between ranks would), so every rank waits "
                "for the others' plans in the same gather_object and no rank is anywhere else: "
                "THUDM/slime#1908's stack (its root cause is open). No rank stands out"
            ),
            expected=Expected(status="hung", stage="checkpoint", no_culprit=True),
            frames=(
                FrameSignature("driver", ("save_model", "train")),
                *(
                    FrameSignature(
                        f"train rank {r}",
                        (
                            "gather",
                            "gather_object",
                            "gather_object",
                            "save_state_dict_async_plan",
                            "async_save",
                            "save_checkpoint",
                        ),
                    )
                    for r in (0, 1)
                ),
            ),
        ),
        FaultSpec(
            name="train_custom_loss_stuck",
            description=(
                "slime's FSDP backend (--train-backend fsdp) with a user's loss plugged in by "
                "--custom-loss-function-path: on train rank 1 the loss loops forever on a "
                "micro-batch without response tokens, and rank 0 waits in the step's all_reduce "
                "(slime#1487); rank 0's log ends in `Timer actor_train start`"
            ),
            expected=Expected(
                status="hung", stage="train", culprit_role="train_rank", culprit_rank=FAULT_RANK
            ),
            frames=(
                FrameSignature(
                    "train rank 1",
                    ("token_mean_loss", "loss_function", "_train_step", "_train_core", "train"),
                ),
                FrameSignature("train rank 0", ("all_reduce", "_train_step", "_train_core")),
            ),
        ),
        FaultSpec(
            name="engine_server_killed",
            description=(
                "mid-rollout, engine 1's HTTP server process is SIGKILLed (as by the OOM killer; "
                "its schedulers die with it, its SGLangEngine actor lives on): its port refuses "
                "connections and the RolloutManager retries its requests (slime gives up after "
                "60 s; the demo keeps retrying)"
            ),
            expected=Expected(
                status="hung",
                stage="rollout_dispatch",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            server_fault="killed_mid_generate",
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature("rollout_manager", ("run", "generate_rollout", "generate")),
            ),
        ),
        FaultSpec(
            name="engine_detokenizer_stalled",
            description=(
                "mid-rollout, engine 1's sglang::detokenizer stops in its decode of an output batch "
                "and never reads again (sglang#36333, #40809: its heartbeat stops, /health turns "
                "503): the process lives, its scheduler finishes the requests and goes idle, their "
                "outputs never reach the HTTP process and the RolloutManager waits on them"
            ),
            expected=Expected(
                status="hung",
                stage="rollout_dispatch",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            server_fault="detokenizer_stalled",
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature("rollout_manager", ("run", "generate_rollout", "generate")),
                FrameSignature(
                    "engine 1 detokenizer",
                    ("_decode_batch_token_id_output", "handle_batch_token_id_out", "event_loop"),
                ),
            ),
        ),
        FaultSpec(
            name="router_worker_removed",
            description=(
                "mid-rollout, every engine's worker is removed from the router (DELETE "
                "/workers/{id}, as slime's SGLangEngine.shutdown does) while the rollout's "
                "requests are in flight: those finish (sgl-router 0.3.2 keeps their connections), "
                "every later /generate gets 503 no_available_workers from the router, and the "
                "RolloutManager retries it; the engines are healthy and idle"
            ),
            expected=Expected(status="hung", stage="rollout_dispatch", culprit_role="router"),
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature("rollout_manager", ("run", "generate_rollout", "generate")),
                # fork keeps the constructor's frames below the router's own
                FrameSignature(
                    "router", ("start", "launch_router", "run_router", "_start_router", "__init__")
                ),
            ),
        ),
        FaultSpec(
            name="router_killed",
            description=(
                "mid-rollout, the router process (the RolloutManager's forked child) is "
                "SIGKILLed, as by the OOM killer: its port refuses connections and the "
                "RolloutManager retries its requests (slime gives up after 60 s; the demo keeps "
                "retrying); the engines are healthy and idle"
            ),
            expected=Expected(status="hung", stage="rollout_dispatch", culprit_role="router"),
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature("rollout_manager", ("run", "generate_rollout", "generate")),
            ),
        ),
        FaultSpec(
            name="rollout_tp_rank_prefetch_stuck",
            description=(
                "engines with 2 TP ranks and HiCache storage (sglang#30760): at the armed rollout, engine "
                "1's TP rank 0 enters the prefetch check's all_reduce for a request its TP rank 1 "
                "never reaches (rank 1's batch is full first: its own free slots), and rank 1 "
                "moves on to wait in broadcast_pyobj for rank 0's next requests, for ever"
            ),
            expected=Expected(
                status="hung",
                stage="rollout_dispatch",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            server_fault="prefetch_check_diverged",
            tp_size=2,
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature("rollout_manager", ("run", "generate_rollout", "generate")),
                FrameSignature(
                    "engine 1 scheduler",
                    (
                        "all_reduce",
                        "_all_reduce_attn_groups",
                        "can_terminate_prefetch",
                        "check_prefetch_progress",
                        "_get_new_batch_prefill_raw",
                        "event_loop_normal",
                    ),
                ),
                FrameSignature(
                    "engine 1 scheduler TP1",
                    ("broadcast", "broadcast_pyobj", "recv_requests", "event_loop_normal"),
                ),
            ),
        ),
        FaultSpec(
            name="startup_tp_rank_killed",
            description=(
                "sglang PR#20287: engines with 2 TP ranks, and engine 1 runs an SGLang from "
                "before that fix; its TP rank 1 is SIGKILLed while it loads (as by the OOM "
                "killer), before it joins the TP group: its TP rank 0 waits in the group's "
                "rendezvous (init_process_group), the launcher blocks in rank 0's ready pipe, the "
                "server never listens, and the `sglang::scheduler_TP1` title is simply missing"
            ),
            expected=Expected(
                status="hung",
                stage="startup",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            uses_fault_after_steps=False,
            server_fault="tp_rank_killed_at_launch",
            tp_size=2,
            engine_listens=False,
            frames=(
                FrameSignature("driver", ("create_rollout_manager", "train")),
                FrameSignature("rollout_manager", ("get", "__init__")),
                FrameSignature(
                    "engine 1 actor",
                    ("_wait_server_healthy", "launch_server_process", "_init_normal", "init"),
                ),
                FrameSignature(
                    "engine 1 scheduler",
                    ("init_process_group", "init_distributed_environment", "init_tp_group"),
                ),
            ),
        ),
        FaultSpec(
            name="rollout_tp_rank_killed",
            description=(
                "engines with 2 TP ranks: mid-rollout, engine 1's TP rank 1 is SIGKILLed in a "
                "batch (an OOM kill); SGLang's SubprocessWatchdog sees its exit code -9 and "
                "SIGQUITs the HTTP process, which kills its whole tree: engine 1's port refuses "
                "connections, its SGLangEngine actor lives on, the RolloutManager retries"
            ),
            expected=Expected(
                status="hung",
                stage="rollout_dispatch",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            server_fault="tp_rank_killed",
            tp_size=2,
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature("rollout_manager", ("run", "generate_rollout", "generate")),
            ),
        ),
        FaultSpec(
            name="rollout_tp_ranks_diverged",
            description=(
                "sglang#27221 (PR#37143): engines with 4 TP ranks and a running-request timeout; "
                "at the armed rollout engine 1's ranks 2 and 3 abort the running batch on their "
                "own clocks (`_abort_on_running_timeout`) and go back to wait in broadcast_pyobj, "
                "while ranks 0 and 1 post the next decode's all_reduce: every scheduler of the "
                "engine waits, in two different collectives, for ever"
            ),
            expected=Expected(
                status="hung",
                stage="rollout_dispatch",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            server_fault="running_timeout_diverged",
            tp_size=4,
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature("rollout_manager", ("run", "generate_rollout", "generate")),
                # the decode's all_reduce is posted on the device group (NCCL in SGLang: the
                # CPU returns at once and waits at the result's sync), so rank 0's frame is
                # the wait in process_batch_result, not the collective
                FrameSignature("engine 1 scheduler", ("process_batch_result", "event_loop_normal")),
                FrameSignature(
                    "engine 1 scheduler TP1", ("process_batch_result", "event_loop_normal")
                ),
                FrameSignature(
                    "engine 1 scheduler TP3",
                    ("broadcast", "broadcast_pyobj", "recv_requests", "event_loop_normal"),
                ),
            ),
        ),
        FaultSpec(
            name="rollout_tp_rank_stuck",
            description=(
                "engines with 2 TP ranks: at the armed rollout, engine 1's last TP rank never "
                "gets past its decode forward (a CUDA sync of a kernel that never finishes on "
                "its GPU alone); it never posts the forward's all_reduce, which its other ranks "
                "posted and wait for at the batch's result, for ever. With the engines on two "
                "nodes (`start_demo(tp_nodes=2)`: SGLang's --nnodes 2, one SGLangEngine actor "
                "per node) that rank runs on the second node, under node rank 1's launcher"
            ),
            expected=Expected(
                status="hung",
                stage="rollout_dispatch",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            server_fault="tp_rank_stuck",
            tp_size=2,
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature("rollout_manager", ("run", "generate_rollout", "generate")),
                FrameSignature("engine 1 scheduler", ("process_batch_result", "event_loop_normal")),
                FrameSignature(
                    "engine 1 scheduler TP1",
                    ("_synchronize", "forward_decode", "run_batch", "event_loop_normal"),
                ),
            ),
        ),
        FaultSpec(
            name="weight_update_session_stuck",
            description=(
                "the job laid out as miles main, which opens a weight-update session on every "
                "engine around each weight update (SGLang 0.5.23's /begin_weight_update, "
                "/end_weight_update): engine 1's scheduler never returns from its "
                "begin_weight_update, and the trainer waits for the session to open"
            ),
            expected=Expected(
                status="hung",
                stage="weight_sync",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            server_fault="stuck_begin_weight_update",
            layout="miles",
            frames=(
                FrameSignature("driver", ("update_weights", "train")),
                FrameSignature(
                    "train rank 0",
                    ("get", "begin_weight_update", "update_weights", "update_weights"),
                ),
                FrameSignature("engine 1 actor", ("_make_request", "begin_weight_update")),
                FrameSignature(
                    "engine 1 scheduler",
                    ("_block_forever", "begin_weight_update", "begin_weight_update"),
                ),
            ),
        ),
        FaultSpec(
            name="serving_cluster_engine_stuck",
            description=(
                "slime's next layout: a detached ServingCluster actor starts the router and the "
                "engines (not the RolloutManager); engine 1's scheduler gets stuck in a decode "
                "step during the rollout"
            ),
            expected=Expected(
                status="hung",
                stage="rollout_dispatch",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            server_fault="stuck_scheduler",
            layout="slime-next",
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature(
                    "rollout_manager",
                    ("run", "generate_rollout", "call_rollout_fn", "_get_rollout_data", "generate"),
                ),
                FrameSignature("engine 1 scheduler", ("forward_decode", "event_loop_normal")),
                # forked from the ServingCluster's constructor: its frames below the fork
                FrameSignature(
                    "router",
                    (
                        "start",
                        "launch_router",
                        "run_router",
                        "_start_router",
                        "start_rollout_servers",
                        "__init__",
                    ),
                ),
            ),
        ),
        # --- issue 45 item 5: the newer public cases
        FaultSpec(
            name="train_fsdp_microbatch_diverged",
            description=(
                "slime's FSDP backend under dynamic batch sizes with the micro-batch counts not "
                "reduced over the DP group (verl PR#5591 / #5451): train rank 1 counts one "
                "micro-batch more than rank 0, so rank 0 leaves its loop and finishes train while "
                "rank 1 waits in its extra micro-batch's collective, which rank 0 never enters"
            ),
            expected=Expected(
                status="hung", stage="train", culprit_role="train_rank", culprit_rank=FAULT_RANK
            ),
            frames=(
                FrameSignature("driver", ("train",)),
                FrameSignature(
                    "train rank 1", ("all_reduce", "_train_step", "_train_core", "train")
                ),
                FrameSignature("train rank 0", ("main_loop",)),
            ),
        ),
        FaultSpec(
            name="offload_pause_stuck",
            description=(
                "colocate with slime PR#2015's offload (generation paused before the engines "
                "release their memory): engine 1's pause_generation inside "
                "release_memory_occupation never returns (its drain never ends)"
            ),
            expected=Expected(
                status="hung",
                stage="offload_onload",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            colocate=True,
            server_fault="hang_pause_generation",
            frames=(
                FrameSignature("rollout_manager", ("offload",)),
                FrameSignature(
                    "engine 1 actor",
                    ("_make_request", "pause_generation", "release_memory_occupation"),
                ),
            ),
        ),
        FaultSpec(
            name="update_pause_orphaned",
            description=(
                "sglang#33696: engine 1's tokenizer worker keeps one shared future for pause and "
                "continue; a second control caller's /continue_generation reaches it while the "
                "weight update's /pause_generation waits for its broadcast: the continue returns, "
                "the pause's HTTP call never does, and the engine is not paused"
            ),
            expected=Expected(
                status="hung",
                stage="weight_sync",
                culprit_role="sglang_engine",
                culprit_engine=FAULT_ENGINE,
            ),
            server_fault="pause_continue_shared_future",
            frames=(
                FrameSignature("engine 1 actor", ("_make_request", "pause_generation")),
                FrameSignature("train rank 0", ("get", "update_weights")),
            ),
        ),
    )
}


def get_fault(name: str) -> FaultSpec:
    """The spec of `name`; ValueError listing the known names otherwise."""
    try:
        return FAULTS[name]
    except KeyError:
        raise ValueError(f"unknown demo fault {name!r}; known: {', '.join(FAULTS)}") from None


def fault_names() -> tuple[str, ...]:
    return tuple(FAULTS)


def server_fault_supported(spec: FaultSpec) -> bool:
    """Whether the SGLang stand-in offers the server fault `spec` relies on."""
    if spec.server_fault is None:
        return True
    from slime_hangdoctor_demo.sglang_server import FAULTS as SERVER_FAULTS

    return spec.server_fault in SERVER_FAULTS

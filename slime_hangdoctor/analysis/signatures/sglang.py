"""SGLang rows: the scheduler and model runner of an engine's server (sglang.md section 5; file
names move between versions, so the rows pin the `sglang/srt/` folder), its idle loop and request
intake, and the names of the frames other modules compare (the detokenizer's loop)."""

from __future__ import annotations

from slime_hangdoctor.analysis.signatures.common import ANY, Block, FrameSig, WaitSig, rows, waits
from slime_hangdoctor.verdict import Stage

SGLANG = "sglang/srt/"

SCHEDULER_FRAMES: tuple[FrameSig, ...] = (
    *rows(
        Stage.NCCL_BROADCAST,
        SGLANG,
        "update_weights_from_distributed _update_bucketed_weights_from_distributed "
        "receive_weights_from_distributed _receive_bucketed_weights_from_distributed",
        what="scheduler receiving the weight broadcast",
    ),
    *rows(
        Stage.WEIGHT_SYNC,
        SGLANG,
        "init_weights_update_group init_custom_process_group destroy_weights_update_group "
        "update_weights_from_tensor update_weights_from_disk update_weights_from_ipc",
        what="scheduler weight update",
    ),
    # SGLang 0.5.23's weight-update session (`/begin_weight_update`, `/end_weight_update`,
    # entrypoints/http_server.py:1458,1473): the scheduler's WeightUpdater.begin_weight_update /
    # end_weight_update (managers/scheduler_components/weight_updater.py:309,323; each ends in a
    # barrier on the TP CPU group) and the model runner's (model_executor/model_runner_components/
    # weight_updater.py:312,317: restore / post-process the packed weights)
    *rows(
        Stage.WEIGHT_SYNC,
        SGLANG,
        "begin_weight_update end_weight_update",
        what="scheduler weight-update session",
    ),
    *rows(
        Stage.OFFLOAD_ONLOAD,
        SGLANG,
        "release_memory_occupation resume_memory_occupation",
        what="scheduler memory release/resume",
    ),
    # the admission loop (0.5.15.post1 scheduler.py:2607-2900) and HiCache's prefetch check in it,
    # a collective over the TP group (hiradix_cache.py:1438-1530; sglang#30760)
    *(
        FrameSig(
            f, Stage.ROLLOUT_DISPATCH, SGLANG, what="scheduler admitting requests", generic=True
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
        FrameSig(f, Stage.ROLLOUT_DISPATCH, SGLANG, what="scheduler running a batch", generic=True)
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
    *rows(
        Stage.STARTUP,
        SGLANG,
        "init_memory_pool init_cuda_graphs capture load_model init_torch_distributed "
        "init_model_worker",
        what="engine startup",
    ),
    FrameSig("__init__", Stage.STARTUP, SGLANG, "Scheduler", "scheduler startup"),
    FrameSig("__init__", Stage.STARTUP, SGLANG, "ModelRunner", "model runner startup"),
)

# One batch of an engine, in the order each of its TP ranks runs it (0.5.15.post1 scheduler.py:
# 1542-1561 `event_loop_normal`: `run_batch`, then `process_batch_result`): the forward posts the
# batch's TP collectives (the row-parallel all-reduces, on the device stream with NCCL), and the
# result waits for them (`copy_done.synchronize()`, batch_result_processor.py:187-635), which needs
# every rank's. A rank whose CPU is still inside the forward, while its peers wait at the result,
# has not posted what they wait for.
BATCH_FORWARD = frozenset(
    {"run_batch", "forward_batch_generation", "forward", "forward_decode", "forward_extend"}
)
BATCH_RESULT = frozenset(
    {"process_batch_result", "process_batch_result_decode", "process_batch_result_prefill"}
)

RENDEZVOUS_WAITS: tuple[WaitSig, ...] = (
    WaitSig(Block.RENDEZVOUS, "init_custom_process_group", "sglang/srt/"),
)
LOOP_WAITS: tuple[WaitSig, ...] = (
    # SGLang's scheduler idle loop: TP0 polls for requests, TP>0 ranks wait in broadcast_pyobj for
    # TP0's (empty) request list. Idle, not a stuck collective.
    *waits(
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
PULL_RAW_REQS = "_pull_raw_reqs"
INTAKE_CALLERS: tuple[tuple[str, str], ...] = (
    ("broadcast_pyobj", "sglang/srt/"),
    (PULL_RAW_REQS, "sglang/srt/"),
)
INTAKE_VIA: tuple[tuple[str, str], ...] = (("point_to_point_pyobj", "sglang/srt/"),)

# The weight-update group's creation in an engine (the SGLangEngine actor's call and the
# scheduler's): the engines' side of the PP weight-group deadlock (THUDM/slime PR #2331).
WEIGHT_GROUP_FUNCS = frozenset({"init_weights_update_group", "init_custom_process_group"})
# the scheduler's side of a colocated (CUDA IPC) weight update
UPDATE_FROM_TENSOR = "update_weights_from_tensor"

# The detokenizer's loop (0.5.15.post1 detokenizer_manager.py:161-169, multi-tokenizer mode's
# `multi_http_worker_event_loop`) and its receive (`sock_recv`, io_struct.py:2295, over zmq's
# `recv_pyobj` / `recv`): a loop thread anywhere else is handling a batch.
DETOKENIZER_LOOPS = frozenset({"event_loop", "multi_http_worker_event_loop"})
DETOKENIZER_RECV = frozenset({"sock_recv", "recv_pyobj", "recv"})
DETOKENIZER_FILE = "detokenizer_manager.py"

# SGLang's communication layers (`lookup.COMM_LAYERS`): its process groups and their collectives
# (`GroupCoordinator` in sglang/srt/distributed/parallel_state.py, communication_op.py's
# `tensor_model_parallel_all_reduce` / `_all_gather`, the device communicators under
# sglang/srt/distributed/device_communicators/) and the object collectives of its utils
# (`broadcast_pyobj`, `point_to_point_pyobj`: utils/common.py, 0.5.15.post1 :2132-2230)
COMM_LAYERS: tuple[tuple[str, str], ...] = (
    (ANY, "sglang/srt/distributed/"),
    ("broadcast_pyobj", SGLANG),
    ("point_to_point_pyobj", SGLANG),
)

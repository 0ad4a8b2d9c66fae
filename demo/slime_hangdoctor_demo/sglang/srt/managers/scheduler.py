"""The stand-in Scheduler: single-threaded event loop with SGLang's names (`sglang/srt/managers/scheduler.py`).

It receives JSON requests from the HTTP process, runs prefill/decode batches (a forward pass is a
sleep of `step_s`), sends outputs and control replies back, and publishes a load/metrics snapshot
(the LoadSnapshot) as 0.5.15.post1 does: after each prefill batch, every
`load_snapshot_publish_interval` (15) decode batches, and when idle (every 0.5 s here). A scheduler
stuck in its first batch after idle therefore still shows its idle snapshot (0 running, 0 waiting). Uncaught exceptions end the engine as
in SGLang: "Scheduler hit an exception", then SIGQUIT to the HTTP process."""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import threading
import time
import traceback
from collections import deque
from multiprocessing.connection import Connection
from typing import Any

from slime_hangdoctor_demo.sglang.srt.distributed import parallel_state
from slime_hangdoctor_demo.sglang.srt.managers.io_struct import recv_msg, send_msg
from slime_hangdoctor_demo.sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from slime_hangdoctor_demo.sglang.srt.managers.scheduler_components.request_receiver import (
    SchedulerRequestReceiver,
)
from slime_hangdoctor_demo.sglang.srt.managers.scheduler_components.weight_updater import (
    SchedulerWeightUpdaterMixin,
)
from slime_hangdoctor_demo.sglang.srt.managers.tp_worker import TpModelWorker
from slime_hangdoctor_demo.sglang.srt.mem_cache.hiradix_cache import HiRadixCache
from slime_hangdoctor_demo.sglang.srt.model_executor.model_runner import ModelRunner
from slime_hangdoctor_demo.sglang.srt.utils.common import log_prefix, setup_logging
from slime_hangdoctor_demo.sglang.utils import TypeBasedDispatcher

Msg = dict[str, Any]

DECODE_LOG_INTERVAL = 40  # SGLang --decode-log-interval

IDLE_GAUGE_REFRESH_S = 30.0  # gauges refresh about every 30 s when idle

IDLE_SNAPSHOT_S = 0.5  # the LoadSnapshot is republished by on_idle

# 0.5.15.post1 server_args.py:1168 (`load_snapshot_publish_interval = 15`): "Publish load snapshot
# to shared memory every N decode iterations. Prefill and idle always publish immediately."
# (scheduler.py:665-676 creates the writer with it; :3466 forces a write after a prefill batch,
# :3580 counts decode batches). A forward that never returns publishes nothing more.
LOAD_SNAPSHOT_PUBLISH_INTERVAL = 15

EOS_TOKEN_ID = 2


logger = logging.getLogger("sglang_standin.scheduler")


def target_length(rid: str, max_new_tokens: int) -> int:
    """Deterministic output length: a quarter of requests run to max_new_tokens, the rest stop early."""
    digest = int(hashlib.sha256(rid.encode()).hexdigest()[:8], 16)
    if max_new_tokens <= 1 or digest % 4 == 0:
        return max(max_new_tokens, 1)
    return 1 + digest % max_new_tokens


class Scheduler(SchedulerWeightUpdaterMixin):
    def __init__(
        self, conn: Connection, cfg: Msg, send_to_detokenizer: Connection | None = None
    ) -> None:
        self.conn = conn
        self.send_lock = threading.Lock()
        # generation outputs go through the detokenizer (0.5.15.post1 scheduler.py:4152,
        # `send_to_detokenizer`), control replies straight to the tokenizer (`send_to_tokenizer`)
        self.send_to_detokenizer = send_to_detokenizer
        self.detok_lock = threading.Lock()
        self.cfg = cfg
        self.server_args: Msg = dict(cfg.get("server_args") or {})
        self.fault = str(cfg.get("fault") or "none")
        self.fault_at = float(cfg.get("fault_at") or 0.0)
        self.fault_arm_file = cfg.get("fault_arm_file") or None
        self.max_total_num_tokens = int(cfg.get("max_total_num_tokens", 65536))
        self.max_running_requests = int(cfg.get("max_running_requests", 64))
        self.waiting_queue: deque[Req] = deque()
        self.running_batch: list[Req] = []
        self.engine_paused = False
        self.offload_tags: set[str] = set()
        self.health_check_acks: list[str] = []
        self.pending_flushes: list[tuple[str, float]] = []
        self.forward_ct = 0
        self.realtime_tokens = {"prefill_compute": 0.0, "prefill_cache": 0.0, "decode": 0.0}
        self.forward_seconds = 0.0
        self.num_retracted = 0
        self.weight_load_duration: dict[str, float] = {}
        self.gauges: Msg = {}
        self.last_gen_throughput = 0.0
        self._log_tokens = 0
        self._log_tic = time.time()
        self._decode_steps = 0
        self._last_gauge_refresh = 0.0
        self._last_snapshot = 0.0
        self._decode_since_publish = 0
        # Tensor parallelism: `tp_size` scheduler processes per engine, rank 0 talks to the HTTP
        # process (the only one with `conn` traffic), every rank joins the TP group.
        self.tp_rank = int(cfg.get("tp_rank", 0))
        self.tp_size = max(int(cfg.get("tp_size", 1)), 1)
        self.request_receiver: SchedulerRequestReceiver | None = None
        self.tree_cache: HiRadixCache | None = None
        self.enable_hicache_storage = False
        self.copy_done: Any = None
        if self.tp_size > 1:
            self.maybe_die_at_launch()
            self.init_tp_group(cfg)
        model_runner = ModelRunner(cfg)
        model_runner.fault_active = self.fault_active
        self.tp_worker = TpModelWorker(model_runner)
        self._request_dispatcher = TypeBasedDispatcher(
            [
                ("generate", self.handle_generate_request),
                ("abort", self.abort_request),
                ("get_internal_state", self.get_internal_state),
                ("flush_cache", self.flush_cache_wrapped),
                ("pause_generation", self.pause_generation),
                ("continue_generation", self.continue_generation),
                ("init_weights_update_group", self.init_weights_update_group),
                ("destroy_weights_update_group", self.destroy_weights_update_group),
                ("update_weights_from_disk", self.update_weights_from_disk),
                ("update_weights_from_distributed", self.update_weights_from_distributed),
                ("update_weights_from_tensor", self.update_weights_from_tensor),
                ("begin_weight_update", self.begin_weight_update),
                ("end_weight_update", self.end_weight_update),
                ("update_weight_version", self.handle_update_weight_version),
                ("release_memory_occupation", self.release_memory_occupation),
                ("resume_memory_occupation", self.resume_memory_occupation),
            ]
        )
        self.refresh_gauges()

    def init_tp_group(self, cfg: Msg) -> None:
        parallel_state.init_distributed_environment(
            world_size=self.tp_size,
            rank=self.tp_rank,
            distributed_init_method=str(cfg["dist_init_method"]),
            timeout_s=float(cfg.get("dist_timeout_s", 1800.0)),
        )
        parallel_state.initialize_model_parallel(self.tp_size)
        tp_group = parallel_state.get_tp_group()
        self.request_receiver = SchedulerRequestReceiver(
            self.conn if self.tp_rank == 0 else None, tp_group, self.is_busy
        )
        # The engine of the fault `prefetch_check_diverged` runs with a HiCache storage backend
        # (--hicache-storage-backend, prefetch policy `timeout`, as in sglang#30760 / #22607).
        self.enable_hicache_storage = self.fault == "prefetch_check_diverged"
        if self.enable_hicache_storage:
            attn_tp_group = parallel_state.get_attention_tp_group()
            self.tree_cache = HiRadixCache(
                tp_group.cpu_group, attn_tp_group.cpu_group, tp_world_size=self.tp_size
            )

    def last_tp_rank(self) -> bool:
        return self.tp_size > 1 and self.tp_rank == self.tp_size - 1

    def maybe_die_at_launch(self) -> None:
        """Fault `tp_rank_killed_at_launch` (sglang PR#20287): the engine's last TP rank is
        SIGKILLed while it loads (as the OOM killer does to a rank allocating its HiCache host
        pool), before it joins the TP group. Rank 0 then waits in the TP group's rendezvous for a
        peer that never comes. (On CPU a peer that dies after joining a gloo group makes the
        others' collectives fail with "Connection closed by peer"; NCCL's would wait. The
        rendezvous is where a gloo group waits as NCCL's would.)"""
        if self.fault == "tp_rank_killed_at_launch" and self.last_tp_rank():
            logger.info("Load weight begin. avail mem=79.10 GB")
            os.kill(os.getpid(), signal.SIGKILL)

    def maybe_die_mid_batch(self) -> None:
        """Fault `tp_rank_killed`: the engine's last TP rank is SIGKILLed during a batch (an OOM
        kill, a segfault in a kernel launch). SGLang 0.5.15.post1's SubprocessWatchdog in the HTTP
        process (utils/watchdog.py, started at entrypoints/engine.py:892-900, 1 s poll) sees the
        child's exit code -9 and SIGQUITs its own process, which kills the process tree."""
        if self.last_tp_rank() and self.fault_active("tp_rank_killed"):
            os.kill(os.getpid(), signal.SIGKILL)

    def _abort_on_running_timeout(self) -> None:
        """0.5.15.post1 scheduler.py:1469-1482 (called from get_next_batch_to_run, :2613): with
        `SGLANG_REQ_RUNNING_TIMEOUT` set, each rank marks the running requests whose
        `forward_entry_time` is older than ITS OWN `time.perf_counter() - timeout`, with no
        cross-rank agreement (sglang#27221, PR#37143). Fault `running_timeout_diverged`: at the
        armed rollout the requests straddle the deadline, and the upper half of the TP ranks read
        their clocks past it first: they abort the whole running batch, the others keep decoding.
        The next forward then splits the group: the decoding ranks post the batch's all_reduce
        on the device group, the others (nothing left to run) go back to `recv_requests` and
        wait in `broadcast_pyobj` on the CPU group, for ever (on GPUs the NCCL all_reduce of the
        decoding ranks never completes: the scheduler watchdog's timeout, 300 s, ends the
        engine)."""
        if not self.running_batch or self.tp_rank < max(self.tp_size // 2, 1):
            return
        if not self.fault_active("running_timeout_diverged"):
            return
        for req in list(self.running_batch):
            self.finish(req, {"type": "abort", "message": "Request running timeout reached."})

    # ---- helpers
    def barrier_tp_cpu_group(self) -> None:
        """`torch.distributed.barrier(group=self.tp_cpu_group)` (0.5.23 weight_updater.py:321,335):
        every TP rank of the engine; nothing to wait for with one rank."""
        if self.tp_size > 1:
            import torch.distributed as dist

            dist.barrier(group=parallel_state.get_tp_group().cpu_group)

    def handle_update_weight_version(self, req: Msg) -> Msg | None:
        """0.5.23 scheduler.py:5630-5634: the scheduler records the new version; the HTTP process
        answers from its own state."""
        return {"success": True}

    def is_busy(self) -> bool:
        return bool(self.running_batch or self.waiting_queue) and not self.engine_paused

    def fault_active(self, name: str) -> bool:
        if self.fault != name or time.time() < self.fault_at:
            return False
        return self.fault_arm_file is None or os.path.exists(self.fault_arm_file)

    def send(self, msg: Msg) -> None:
        if self.tp_rank != 0:
            # only TP rank 0 has the sockets to the tokenizer/detokenizer (0.5.15.post1
            # scheduler.py:615-637 `init_ipc_channels(is_rank_zero=...)`): the others send nothing
            return
        if msg.get("type") == "output" and self.send_to_detokenizer is not None:
            if not send_msg(self.send_to_detokenizer, self.detok_lock, msg):
                os._exit(0)  # the detokenizer is gone (it dies with the HTTP process)
            return
        if not send_msg(self.conn, self.send_lock, msg):
            os._exit(0)  # the HTTP process is gone

    def is_fully_idle(self) -> bool:
        return not self.running_batch and not self.waiting_queue

    def num_used_tokens(self) -> int:
        return sum(r.num_tokens for r in self.running_batch)

    # ---- event loop
    def run_event_loop(self) -> None:
        self.event_loop_normal()

    def event_loop_normal(self) -> None:
        while True:
            if self.request_receiver is not None:
                # TP ranks: rank 0 pulls, every rank takes part in the broadcast (scheduler.py:1549)
                recv_reqs = self.request_receiver.recv_requests()
            else:
                recv_reqs = self.recv_requests()
            self.process_input_requests(recv_reqs)
            if self.engine_paused:
                # scheduler.py:1551: paused (in_place/retract) the loop only serves control
                # requests: no batch, no on_idle, so the LoadSnapshot is not republished and
                # /v1/loads keeps its last values.
                continue
            batch = self.get_next_batch_to_run()
            if batch is not None:
                result = self.run_batch(batch)
                self.process_batch_result(batch, result)
            else:
                self.on_idle()

    def recv_requests(self) -> list[Msg]:
        busy = bool(self.running_batch or self.waiting_queue) and not self.engine_paused
        reqs: list[Msg] = []
        timeout = 0.0 if busy else 0.05
        while self.conn.poll(timeout):
            try:
                reqs.append(recv_msg(self.conn))
            except (EOFError, OSError):
                os._exit(0)
            timeout = 0.0
        return reqs

    def process_input_requests(self, recv_reqs: list[Msg]) -> None:
        for recv_req in recv_reqs:
            output = self._request_dispatcher(recv_req)
            if output is not None and "id" in recv_req:
                self.send({"type": "reply", "id": recv_req["id"], "result": output})

    def get_next_batch_to_run(self) -> ScheduleBatch | None:
        if self.engine_paused:
            return None
        self._abort_on_running_timeout()
        if self.tp_size > 1:
            prefill = self.get_new_batch_prefill()
            if prefill is not None:
                return prefill
            return ScheduleBatch("decode", list(self.running_batch)) if self.running_batch else None
        new: list[Req] = []
        while self.waiting_queue and len(self.running_batch) + len(new) < self.max_running_requests:
            new.append(self.waiting_queue.popleft())
        if new:
            return ScheduleBatch("prefill", new)
        if self.running_batch:
            return ScheduleBatch("decode", list(self.running_batch))
        return None

    def get_new_batch_prefill(self) -> ScheduleBatch | None:
        return self._get_new_batch_prefill_raw()

    def get_num_allocatable_reqs(self, running_bs: int) -> int:
        """This rank's own free request slots (SGLang: `req_to_token_pool.available_size()`, local
        to each TP rank: PR#33029). Fault `prefetch_check_diverged`: the ranks other than 0 have
        none left (slots that only they still hold), so their admission loop stops earlier."""
        if self.tp_rank != 0 and self.fault_active("prefetch_check_diverged"):
            return 0
        return self.max_running_requests - running_bs

    def _get_new_batch_prefill_raw(self) -> ScheduleBatch | None:
        """The admission loop of 0.5.15.post1 scheduler.py:2762-2900: for each waiting request,
        stop once this rank's batch is full, then (HiCache storage) ask whether its prefetch may
        end: `check_prefetch_progress` is a collective over the TP group called from inside a loop
        whose trip count is per-rank state (:2870-2890; sglang#30760)."""
        can_run: list[Req] = []
        running_bs = len(self.running_batch)
        for req in list(self.waiting_queue):
            if len(can_run) >= self.get_num_allocatable_reqs(running_bs):
                break  # self.running_batch.batch_is_full
            if self.tree_cache is not None:
                prefetch_done = self.tree_cache.check_prefetch_progress(req.rid)
                if not prefetch_done:
                    continue  # skip staging requests that are ongoing prefetch
            can_run.append(req)
        if not can_run:
            return None
        for req in can_run:
            self.waiting_queue.remove(req)
        return ScheduleBatch("prefill", can_run)

    def run_batch(self, batch: ScheduleBatch) -> list[tuple[int, float]]:
        tic = time.perf_counter()
        self.maybe_die_mid_batch()
        result = self.tp_worker.forward_batch_generation(batch)
        self.copy_done = self.tp_worker.model_runner.copy_done
        self.forward_seconds += time.perf_counter() - tic
        self.forward_ct += 1
        return result

    def process_batch_result(self, batch: ScheduleBatch, result: list[tuple[int, float]]) -> None:
        if self.copy_done is not None:
            # the batch's TP all-reduce (NCCL on GPUs: the CPU waits for it at the result copy)
            try:
                self.copy_done.wait()
            except RuntimeError:
                # gloo's "Connection reset by peer": a TP peer died. The device group is NCCL in
                # SGLang, which reports no dead peer: its kernel waits, and the CPU with it at
                # the result copy's synchronize, until something else ends the process.
                self.tp_worker.model_runner._synchronize()
            self.copy_done = None
        if batch.mode == "prefill":
            self.process_batch_result_prefill(batch, result)
        else:
            self.process_batch_result_decode(batch, result)
        for ack in self.health_check_acks:
            self.send({"type": "health", "id": ack})
        self.health_check_acks.clear()
        self.publish_metrics()  # Prometheus counters are written as they count
        if batch.mode == "prefill":
            self.publish_snapshot()  # forced (scheduler.py:3466)
        else:
            self._decode_since_publish += 1
            if self._decode_since_publish >= LOAD_SNAPSHOT_PUBLISH_INTERVAL:
                self.publish_snapshot()  # every 15 decode batches (scheduler.py:3580)

    def process_batch_result_prefill(
        self, batch: ScheduleBatch, result: list[tuple[int, float]]
    ) -> None:
        new_tokens = sum(r.input_len for r in batch.reqs)
        self.realtime_tokens["prefill_compute"] += new_tokens
        self.running_batch.extend(batch.reqs)
        self._append_tokens(batch.reqs, result)
        if self.tp_rank != 0:
            # only the stats-logging rank logs batches (0.5.15.post1
            # scheduler_components/metrics_reporter.py:510-521, `is_stats_logging_rank`)
            self.refresh_gauges()
            return
        logger.info(
            "Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: 0, token usage: %.2f, "
            "#running-req: %d, #queue-req: %d",
            len(batch.reqs),
            new_tokens,
            self.num_used_tokens() / self.max_total_num_tokens,
            len(self.running_batch),
            len(self.waiting_queue),
        )
        self.refresh_gauges()

    def process_batch_result_decode(
        self, batch: ScheduleBatch, result: list[tuple[int, float]]
    ) -> None:
        self.realtime_tokens["decode"] += len(batch.reqs)
        self._log_tokens += len(batch.reqs)
        self._append_tokens(batch.reqs, result)
        self._decode_steps += 1
        if self._decode_steps % DECODE_LOG_INTERVAL == 0 and self.tp_rank == 0:
            now = time.time()
            self.last_gen_throughput = self._log_tokens / max(now - self._log_tic, 1e-6)
            self._log_tokens, self._log_tic = 0, now
            logger.info(
                "Decode batch, #running-req: %d, #token: %d, token usage: %.2f, cuda graph: False, "
                "gen throughput (token/s): %.2f, #queue-req: %d",
                len(self.running_batch),
                self.num_used_tokens(),
                self.num_used_tokens() / self.max_total_num_tokens,
                self.last_gen_throughput,
                len(self.waiting_queue),
            )
            self.refresh_gauges()

    def _append_tokens(self, reqs: list[Req], result: list[tuple[int, float]]) -> None:
        for req, (token, logprob) in zip(reqs, result, strict=False):
            if req.done():
                continue
            req.output_ids.append(token)
            req.logprobs.append(logprob)
            if req.done():
                self.finish(req, self._finish_reason(req))

    def _finish_reason(self, req: Req) -> Msg:
        if len(req.output_ids) >= req.max_new_tokens:
            return {"type": "length", "length": req.max_new_tokens}
        req.output_ids[-1] = EOS_TOKEN_ID
        return {"type": "stop", "matched": EOS_TOKEN_ID}

    def finish(self, req: Req, reason: Msg) -> None:
        if req in self.running_batch:
            self.running_batch.remove(req)
        self.send(
            {
                "type": "output",
                "rid": req.rid,
                "output_ids": req.output_ids,
                "logprobs": req.logprobs if req.return_logprob else None,
                "finish_reason": reason,
                "prompt_tokens": req.input_len,
            }
        )

    def on_idle(self) -> None:
        now = time.time()
        for flush_id, deadline in list(self.pending_flushes):
            if self.is_fully_idle() or now >= deadline:
                self.pending_flushes.remove((flush_id, deadline))
                self.send({"type": "reply", "id": flush_id, "result": self.flush_cache()})
        if now - self._last_gauge_refresh >= IDLE_GAUGE_REFRESH_S:
            if self.is_fully_idle():
                self.last_gen_throughput = 0.0
            self.refresh_gauges()
        if now - self._last_snapshot >= IDLE_SNAPSHOT_S:
            self.publish_snapshot()

    # ---- observability
    def load(self) -> Msg:
        used = self.num_used_tokens()
        return {
            "dp_rank": 0,
            "num_running_reqs": len(self.running_batch),
            "num_waiting_reqs": len(self.waiting_queue),
            "num_waiting_uncached_tokens": sum(r.input_len for r in self.waiting_queue),
            "num_used_tokens": used,
            "num_total_tokens": self.max_total_num_tokens,
            "max_total_num_tokens": self.max_total_num_tokens,
            "max_running_requests": self.max_running_requests,
            "token_usage": round(used / self.max_total_num_tokens, 4),
            "gen_throughput": round(self.last_gen_throughput, 2),
            "cache_hit_rate": 0.0,
            "utilization": round(used / self.max_total_num_tokens, 4),
            # 0.5.15.post1 never sets it while paused (only the async weight sync of later
            # versions does): `num_paused_reqs` and `queues.paused` stay 0.
            "num_paused_reqs": 0,
            "num_retracted_reqs": self.num_retracted,
        }

    def refresh_gauges(self) -> None:
        load = self.load()
        self.gauges = {
            "num_running_reqs": load["num_running_reqs"],
            "num_queue_reqs": load["num_waiting_reqs"],
            "num_grammar_queue_reqs": 0,
            "gen_throughput": load["gen_throughput"],
            "token_usage": load["token_usage"],
            "num_used_tokens": load["num_used_tokens"],
            "cache_hit_rate": 0.0,
            "utilization": load["utilization"],
            "num_retracted_reqs": self.num_retracted,
            "num_paused_reqs": load["num_paused_reqs"],
            "max_total_num_tokens": self.max_total_num_tokens,
            "is_cuda_graph": 0,
            "new_token_ratio": 0.7,
            "kv_used_tokens": load["num_used_tokens"],
            "kv_available_tokens": self.max_total_num_tokens - load["num_used_tokens"],
        }
        self._last_gauge_refresh = time.time()
        self.publish_metrics()

    def publish_metrics(self) -> None:
        """The scheduler's Prometheus values (multiprocess files in SGLang: `/metrics` reads them
        at once, whatever the LoadSnapshot's cadence)."""
        self.send(
            {
                "type": "metrics",
                "gauges": self.gauges,
                "realtime_tokens": dict(self.realtime_tokens),
                "forward_execution_seconds": self.forward_seconds,
                "weight_load_duration": dict(self.weight_load_duration),
            }
        )

    def publish_snapshot(self) -> None:
        """The LoadSnapshot (shared memory in SGLang: `/v1/loads`, `/get_load`)."""
        self._last_snapshot = time.time()
        self._decode_since_publish = 0
        self.send({"type": "snapshot", "ts": self._last_snapshot, "load": self.load()})
        self.publish_metrics()

    # ---- request handlers (weight and memory ones: scheduler_components/weight_updater.py)
    def handle_generate_request(self, req: Msg) -> Msg | None:
        if req.get("health") and not self.is_fully_idle():
            self.health_check_acks.append(str(req.get("rid")))
            return None
        max_new = max(int(req.get("max_new_tokens", 16)), 1)
        rid = str(req["rid"])
        target = 1 if req.get("health") else target_length(rid, max_new)
        new_req = Req(
            rid=rid,
            input_len=max(int(req.get("input_len", 1)), 1),
            max_new_tokens=max_new,
            target_len=target,
            return_logprob=bool(req.get("return_logprob")),
            health=bool(req.get("health")),
        )
        self._prefetch_kvcache(new_req)
        self.waiting_queue.append(new_req)
        return None

    def _prefetch_kvcache(self, req: Req) -> None:
        """HiCache storage: prefetch the request's prefix as it joins the queue (0.5.15.post1
        scheduler.py:2284-2319)."""
        if self.tree_cache is not None:
            self.tree_cache.prefetch_from_storage(req.rid, req.input_len)

    def abort_request(self, req: Msg) -> Msg | None:
        rid = req.get("rid")
        abort_all = bool(req.get("abort_all"))
        for queued in list(self.waiting_queue):
            if abort_all or queued.rid == rid:
                self.waiting_queue.remove(queued)
                if self.tree_cache is not None:
                    self.tree_cache.terminate_prefetch(queued.rid)  # scheduler.py:2388
                self.finish(queued, {"type": "abort", "message": "Abort in waiting queue"})
        for running in list(self.running_batch):
            if abort_all or running.rid == rid:
                self.finish(running, {"type": "abort", "message": "Abort before decode"})
        # No snapshot of its own: the next batch or idle pass publishes (a scheduler paused
        # in_place/retract keeps its last one, scheduler.py:1551).
        return None

    def get_internal_state(self, req: Msg) -> Msg | None:
        state = dict(self.server_args)
        state.update(
            {
                "last_gen_throughput": round(self.last_gen_throughput, 2),
                "memory_usage": {
                    "weight": 0.5,
                    "kvcache": round(self.max_total_num_tokens * 2 / 2**20, 3),
                    "token_capacity": self.max_total_num_tokens,
                    "graph": 0.0,
                },
                "effective_max_running_requests_per_dp": self.max_running_requests,
            }
        )
        return {"states": [state]}

    def flush_cache_wrapped(self, req: Msg) -> Msg | None:
        timeout = req.get("timeout")
        if timeout and not self.is_fully_idle():
            self.pending_flushes.append((str(req["id"]), time.time() + float(timeout)))
            return None
        return self.flush_cache()

    def flush_cache(self) -> Msg:
        if self.is_fully_idle():
            logger.info("Cache flushed successfully!")
            return {"success": True, "message": ""}
        logger.warning(
            "Cache not flushed because there are pending requests. #queue-req: %d, #running-req: %d",
            len(self.waiting_queue),
            len(self.running_batch),
        )
        return {"success": False, "message": ""}

    def pause_generation(self, req: Msg) -> Msg | None:
        """scheduler.py:3996-4057: `in_place` only sets the flag; `retract` moves the running
        requests back to the waiting queue and refreshes the gauges (gen_throughput zeroed) but,
        like `in_place`, publishes no LoadSnapshot."""
        self.engine_paused = True
        if req.get("mode") == "in_place":
            return None
        if req.get("mode") == "retract":
            self.num_retracted += len(self.running_batch)
            for r in reversed(self.running_batch):
                self.waiting_queue.appendleft(r)
            self.running_batch.clear()
        self.last_gen_throughput = 0.0
        self.refresh_gauges()
        return None

    def continue_generation(self, req: Msg) -> Msg | None:
        self.engine_paused = False
        logger.info(
            "[continue_generation] torch.cuda.empty_cache() called: reserved 0.00 MB -> 0.00 MB "
            "(freed 0.00 MB)"
        )
        return None


def log_startup(scheduler: Scheduler) -> None:
    """The startup lines a real scheduler prints (reference/sglang.md §7)."""
    args = scheduler.server_args
    tokens = scheduler.max_total_num_tokens
    kv_gb = tokens * 2 / 2**20
    logger.info("Init torch distributed begin.")
    logger.info("Load weight begin. avail mem=79.10 GB")
    logger.info(
        "Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=78.60 GB, mem usage=0.50 GB."
    )
    logger.info(
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: %d, K size: %.2f GB, V size: %.2f GB",
        tokens,
        kv_gb / 2,
        kv_gb / 2,
    )
    logger.info(
        "max_total_num_tokens=%d, chunked_prefill_size=%s, max_prefill_tokens=%s, max_running_requests=%d, context_len=%s, available_gpu_mem=78.00 GB",
        tokens,
        args.get("chunked_prefill_size", 8192),
        args.get("max_prefill_tokens", 16384),
        scheduler.max_running_requests,
        args.get("context_length", 4096),
    )


def run_scheduler_process(
    conn: Connection, parent_pid: int, send_to_detokenizer: Connection | None = None
) -> None:
    """Read the config message, announce readiness, run the loop; crash like SGLang on exceptions."""
    try:
        cfg = recv_msg(conn)
    except (EOFError, OSError, ValueError):
        os._exit(1)
    title = str(cfg.get("title") or "sglang::scheduler")
    setup_logging(log_prefix(title))
    try:
        scheduler = Scheduler(conn, cfg, send_to_detokenizer)
        log_startup(scheduler)
        ready = {
            "type": "ready",
            "status": "ready",
            "max_total_num_tokens": scheduler.max_total_num_tokens,
            "max_req_input_len": scheduler.max_total_num_tokens - 1,
        }
        if scheduler.tp_rank == 0:
            scheduler.send(ready)
        else:
            # every scheduler writes "ready" to its own launcher pipe (engine.py:1368-1397 reads
            # each); only a node of rank >= 1 reads its ranks' (entrypoints/engine.py)
            send_msg(conn, scheduler.send_lock, ready)
        scheduler.run_event_loop()
    except Exception:
        logger.error("Scheduler hit an exception: %s", traceback.format_exc())
        try:
            os.kill(parent_pid, signal.SIGQUIT)
        except OSError:
            pass
        os._exit(1)

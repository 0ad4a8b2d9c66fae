"""The scheduler child of the SGLang stand-in (process title `sglang::scheduler_TP0`).

`sglang_server` starts this module as a separate process, the way SGLang 0.5.15 starts
`run_scheduler_process`: argv[0] is the process title, so `/proc/<pid>/cmdline` starts with
`sglang::scheduler_TP0` and psutil matching on the cmdline works as on a real engine.

It talks to the HTTP process over one socket pair (length-prefixed JSON through
`multiprocessing.connection.Connection`), is single-threaded like the real scheduler, and runs an
event loop with SGLang's function names (`event_loop_normal`, `recv_requests`,
`process_input_requests`, `get_next_batch_to_run`, `run_batch`, `forward_decode`,
`process_batch_result`, `on_idle`, `update_weights_from_distributed`, `init_custom_process_group`),
so py-spy stacks of a stuck stand-in look like reference/sglang.md §5.

Weight sync is real: `init_weights_update_group` joins a torch.distributed group (gloo: this box has no
GPU, so a requested "nccl" backend is served by gloo) through `init_custom_process_group`, and
`update_weights_from_distributed` receives real `broadcast(src=0)` calls. A trainer side joins the
same group with `init_custom_process_group(..., rank=0)` from this module. torch is imported only there.

Uncaught exceptions inside a handler end the engine as in SGLang: "Scheduler hit an exception", then
SIGQUIT to the HTTP process. The process dies with its parent (PR_SET_PDEATHSIG plus a ppid poll).
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any

Msg = dict[str, Any]

FAULTS = (
    "none",
    "never_healthy",
    "stuck_scheduler",
    "skip_weight_sync",
    "hang_update_weights_from_tensor",
)
DEFAULT_PG_TIMEOUT_S = 1800.0  # torch default_pg_timeout, which SGLang's weight-update group uses
DECODE_LOG_INTERVAL = 40  # SGLang --decode-log-interval
IDLE_GAUGE_REFRESH_S = 30.0  # gauges refresh about every 30 s when idle
IDLE_SNAPSHOT_S = 0.5  # the LoadSnapshot is republished by on_idle
EOS_TOKEN_ID = 2

logger = logging.getLogger("sglang_standin.scheduler")


# --------------------------------------------------------------------------- wire format


def send_msg(conn: Connection, lock: threading.Lock, msg: Msg) -> bool:
    """Send one JSON message; False when the peer is gone."""
    import json

    data = json.dumps(msg, separators=(",", ":")).encode("utf-8")
    try:
        with lock:
            conn.send_bytes(data)
    except (OSError, EOFError, ValueError):
        return False
    return True


def recv_msg(conn: Connection) -> Msg:
    """Receive one JSON message (raises EOFError / OSError when the peer is gone)."""
    import json

    msg = json.loads(conn.recv_bytes().decode("utf-8"))
    if not isinstance(msg, dict):
        raise ValueError("message is not an object")
    return msg


# --------------------------------------------------------------------------- process plumbing


def set_process_name(title: str) -> None:
    """Set comm (what `ps -o comm` and psutil.name() show), truncated to 15 bytes like setproctitle."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, title.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def die_with_parent(parent_pid: int) -> None:
    """PR_SET_PDEATHSIG=SIGKILL (what SGLang's kill_itself_when_parent_died does) plus a ppid poll."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:
        os._exit(0)

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent_pid:
                os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def log_prefix(title: str) -> str:
    """`sglang::scheduler_TP0` -> ` TP0`: SGLang's log prefix mirrors the title suffix."""
    suffix = title.split("sglang::scheduler", 1)[-1].lstrip("_")
    return f" {suffix.replace('_', ' ')}" if suffix else ""


def setup_logging(prefix: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(f"[%(asctime)s{prefix}] %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    )
    root = logging.getLogger("sglang_standin")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False


# --------------------------------------------------------------------------- torch.distributed


def init_custom_process_group(
    backend: str,
    init_method: str,
    world_size: int,
    rank: int,
    group_name: str,
    timeout: timedelta | None = None,
) -> Any:
    """Create a process group next to (not as) the default one, as SGLang's helper does.

    Rendezvous on `init_method` (rank 0 hosts the TCPStore), prefix the store with the group name, and
    build the group with torch's internal helper, so that a trainer that already has its own default
    group and an engine that has none can share it. Returns the ProcessGroup.
    """
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    timeout = timeout or timedelta(seconds=DEFAULT_PG_TIMEOUT_S)
    rendezvous = c10d.rendezvous  # type: ignore[attr-defined]
    store, rank, world_size = next(rendezvous(init_method, rank, world_size, timeout=timeout))
    store.set_timeout(timeout)
    store = c10d.PrefixStore(group_name, store)
    pg, _ = c10d._new_process_group_helper(
        world_size,
        rank,
        [],
        dist.Backend(backend),
        store,
        group_name=group_name,  # type: ignore[arg-type]
        timeout=timeout,
    )
    c10d._world.pg_group_ranks[pg] = {i: i for i in range(world_size)}
    return pg


def torch_dtype(name: str) -> Any:
    import torch

    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def _block_forever(reason: str) -> None:
    """Sleep forever in small steps (a stand-in for a CUDA sync or collective that never ends)."""
    logger.debug("blocking forever: %s", reason)
    while True:
        time.sleep(1.0)


# --------------------------------------------------------------------------- requests and batches


@dataclass
class Req:
    rid: str
    input_len: int
    max_new_tokens: int
    target_len: int
    return_logprob: bool = False
    health: bool = False
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    created: float = field(default_factory=time.time)

    def done(self) -> bool:
        return len(self.output_ids) >= self.target_len

    @property
    def num_tokens(self) -> int:
        return self.input_len + len(self.output_ids)


@dataclass
class ScheduleBatch:
    mode: str  # prefill | decode
    reqs: list[Req]


def target_length(rid: str, max_new_tokens: int) -> int:
    """Deterministic output length: a quarter of requests run to max_new_tokens, the rest stop early."""
    digest = int(hashlib.sha256(rid.encode()).hexdigest()[:8], 16)
    if max_new_tokens <= 1 or digest % 4 == 0:
        return max(max_new_tokens, 1)
    return 1 + digest % max_new_tokens


def next_token(rid: str, position: int) -> tuple[int, float]:
    digest = int(hashlib.sha256(f"{rid}:{position}".encode()).hexdigest()[:8], 16)
    return 100 + digest % 30000, -0.05 - (digest % 97) / 100.0


# --------------------------------------------------------------------------- model runner / worker


class ModelRunner:
    """Holds the "weights" and the weight-update process groups (names follow SGLang's ModelRunner)."""

    def __init__(self, cfg: Msg) -> None:
        self.cfg = cfg
        self.step_s = float(cfg.get("step_s", 0.02))
        self.groups: dict[str, Any] = {}
        self.weights: dict[str, tuple[list[int], float]] = {}  # name -> (shape, checksum)
        self.fault_active: Callable[[str], bool] = lambda name: False

    # ---- forward
    def forward(self, batch: ScheduleBatch) -> list[tuple[int, float]]:
        if batch.mode == "prefill":
            return self.forward_extend(batch)
        return self.forward_decode(batch)

    def forward_extend(self, batch: ScheduleBatch) -> list[tuple[int, float]]:
        time.sleep(self.step_s)
        return [next_token(r.rid, len(r.output_ids)) for r in batch.reqs]

    def forward_decode(self, batch: ScheduleBatch) -> list[tuple[int, float]]:
        if self.fault_active("stuck_scheduler"):
            logger.debug("fault stuck_scheduler: forward never returns")
            self._synchronize()
        time.sleep(self.step_s)
        return [next_token(r.rid, len(r.output_ids)) for r in batch.reqs]

    def _synchronize(self) -> None:
        _block_forever("copy_done.synchronize() of a batch that never finishes")

    # ---- weight-update group
    def init_weights_update_group(self, req: Msg) -> tuple[bool, str]:
        address = str(req.get("master_address", "127.0.0.1"))
        port = int(req.get("master_port", 0))
        rank = int(req.get("rank_offset", 1))  # + tp_rank (0)
        world_size = int(req.get("world_size", 2))
        group_name = str(req.get("group_name", "weight_update_group"))
        requested = str(req.get("backend", "nccl"))
        logger.info(
            "init custom process group: master_address=%s, master_port=%s, rank_offset=%s, "
            "rank=%s, world_size=%s, group_name=%s, backend=%s",
            address,
            port,
            req.get("rank_offset"),
            rank,
            world_size,
            group_name,
            requested,
        )
        if address in ("127.0.0.1", "localhost"):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        if self.fault_active("skip_weight_sync"):
            port = _closed_port()  # never reaches the trainer's store: as with a wrong port / IB
        timeout = timedelta(
            seconds=float(self.cfg.get("weight_sync_timeout_s", DEFAULT_PG_TIMEOUT_S))
        )
        try:
            self.groups[group_name] = init_custom_process_group(
                backend="gloo",  # no GPU in the stand-in: nccl is served by gloo
                init_method=f"tcp://{address}:{port}",
                world_size=world_size,
                rank=rank,
                group_name=group_name,
                timeout=timeout,
            )
        except Exception as exc:
            message = f"Failed to initialize custom process group: {exc}."
            logger.error(message)
            return False, message
        return True, "Succeeded to initialize custom process group."

    def destroy_weights_update_group(self, group_name: str) -> tuple[bool, str]:
        pg = self.groups.pop(group_name, None)
        if pg is None:
            return False, "The group to be destroyed does not exist."
        import torch.distributed as dist

        try:
            dist.destroy_process_group(pg)
        except Exception as exc:
            return False, f"Failed to destroy custom process group: {exc}."
        return True, "Succeeded to destroy custom process group."

    def update_weights_from_distributed(self, req: Msg) -> tuple[bool, str]:
        names = [str(n) for n in req.get("names") or []]
        dtypes = [str(d) for d in req.get("dtypes") or []]
        shapes = [list(map(int, s)) for s in req.get("shapes") or []]
        group_name = str(req.get("group_name", "weight_update_group"))
        if not (len(names) == len(dtypes) == len(shapes)):
            return False, "names, dtypes and shapes must have the same length"
        pg = self.groups.get(group_name)
        if pg is None:
            return False, f"Group {group_name} not in {list(self.groups)}"
        if self.fault_active("skip_weight_sync"):
            self._wait_for_weights()
        try:
            if req.get("load_format") == "flattened_bucket":
                received = self._update_bucketed_weights_from_distributed(names, dtypes, shapes, pg)
            else:
                received = self._update_weights_unbucketed(names, dtypes, shapes, pg)
        except Exception as exc:
            return False, (
                f"Failed to update parameter online: {exc}. The full weights of the ModelRunner are "
                "partially updated. Please discard the whole weights."
            )
        self.load_weights(received)
        return True, "Succeeded to update parameter online."

    def _wait_for_weights(self) -> None:
        _block_forever("weights that are never broadcast (the engine skipped the sync)")

    def _update_weights_unbucketed(
        self, names: list[str], dtypes: list[str], shapes: list[list[int]], pg: Any
    ) -> list[tuple[str, Any]]:
        import torch
        import torch.distributed as dist

        out: list[tuple[str, Any]] = []
        for name, dtype, shape in zip(names, dtypes, shapes, strict=False):
            tensor = torch.empty(shape, dtype=torch_dtype(dtype))
            handle = dist.broadcast(tensor, src=0, group=pg, async_op=True)
            handle.wait()
            out.append((name, tensor))
        return out

    def _update_bucketed_weights_from_distributed(
        self, names: list[str], dtypes: list[str], shapes: list[list[int]], pg: Any
    ) -> list[tuple[str, Any]]:
        """`flattened_bucket`: one synchronous broadcast of all tensors flattened (dtype of the first)."""
        import math

        import torch
        import torch.distributed as dist

        sizes = [math.prod(s) for s in shapes]
        flat = torch.empty(sum(sizes), dtype=torch_dtype(dtypes[0] if dtypes else "float32"))
        dist.broadcast(flat, src=0, group=pg)
        out: list[tuple[str, Any]] = []
        offset = 0
        for name, size, shape in zip(names, sizes, shapes, strict=False):
            out.append((name, flat[offset : offset + size].view(shape)))
            offset += size
        return out

    def load_weights(self, named: Iterable[tuple[str, Any]]) -> None:
        for name, tensor in named:
            self.weights[name] = (list(tensor.shape), float(tensor.float().sum()))

    def update_weights_from_tensor(self, req: Msg) -> tuple[bool, str]:
        tensors = req.get("serialized_named_tensors") or []
        if not isinstance(tensors, list):
            return False, "serialized_named_tensors must be a list"
        if self.fault_active("hang_update_weights_from_tensor"):
            self._barrier_tp_cpu_group()
        time.sleep(self.step_s)  # open the IPC handles and copy
        for i, item in enumerate(tensors):
            self.weights[f"tensor_bucket_{i}"] = ([len(str(item))], 0.0)
        return True, "Succeeded to update model weights."

    def _barrier_tp_cpu_group(self) -> None:
        _block_forever("torch.distributed.barrier(tp_cpu_group) that a peer never reaches")


def _closed_port() -> int:
    """A loopback port that nothing listens on (bound, then released)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TpModelWorker:
    """The thin worker layer between scheduler and model runner (as `managers/tp_worker.py`)."""

    def __init__(self, model_runner: ModelRunner) -> None:
        self.model_runner = model_runner

    def forward_batch_generation(self, batch: ScheduleBatch) -> list[tuple[int, float]]:
        return self.model_runner.forward(batch)

    def init_weights_update_group(self, req: Msg) -> tuple[bool, str]:
        return self.model_runner.init_weights_update_group(req)

    def destroy_weights_update_group(self, req: Msg) -> tuple[bool, str]:
        return self.model_runner.destroy_weights_update_group(
            str(req.get("group_name", "weight_update_group"))
        )

    def update_weights_from_distributed(self, req: Msg) -> tuple[bool, str]:
        return self.model_runner.update_weights_from_distributed(req)

    def update_weights_from_tensor(self, req: Msg) -> tuple[bool, str]:
        return self.model_runner.update_weights_from_tensor(req)


class TypeBasedDispatcher:
    """Routes a request to its handler by type (as `sglang/utils.py`); exceptions are not caught."""

    def __init__(self, mapping: list[tuple[str, Callable[[Msg], Msg | None]]]) -> None:
        self._mapping = dict(mapping)

    def __call__(self, req: Msg) -> Msg | None:
        handler = self._mapping.get(str(req.get("type")))
        if handler is None:
            raise ValueError(f"Invalid object: {req.get('type')!r}")
        return handler(req)


# --------------------------------------------------------------------------- the scheduler


class Scheduler:
    def __init__(self, conn: Connection, cfg: Msg) -> None:
        self.conn = conn
        self.send_lock = threading.Lock()
        self.cfg = cfg
        self.server_args: Msg = dict(cfg.get("server_args") or {})
        self.fault = str(cfg.get("fault") or "none")
        self.fault_at = float(cfg.get("fault_at") or 0.0)
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
                ("update_weights_from_distributed", self.update_weights_from_distributed),
                ("update_weights_from_tensor", self.update_weights_from_tensor),
                ("release_memory_occupation", self.release_memory_occupation),
                ("resume_memory_occupation", self.resume_memory_occupation),
            ]
        )
        self.refresh_gauges()

    # ---- helpers
    def fault_active(self, name: str) -> bool:
        return self.fault == name and time.time() >= self.fault_at

    def send(self, msg: Msg) -> None:
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
            recv_reqs = self.recv_requests()
            self.process_input_requests(recv_reqs)
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
        new: list[Req] = []
        while self.waiting_queue and len(self.running_batch) + len(new) < self.max_running_requests:
            new.append(self.waiting_queue.popleft())
        if new:
            return ScheduleBatch("prefill", new)
        if self.running_batch:
            return ScheduleBatch("decode", list(self.running_batch))
        return None

    def run_batch(self, batch: ScheduleBatch) -> list[tuple[int, float]]:
        tic = time.perf_counter()
        result = self.tp_worker.forward_batch_generation(batch)
        self.forward_seconds += time.perf_counter() - tic
        self.forward_ct += 1
        return result

    def process_batch_result(self, batch: ScheduleBatch, result: list[tuple[int, float]]) -> None:
        if batch.mode == "prefill":
            self.process_batch_result_prefill(batch, result)
        else:
            self.process_batch_result_decode(batch, result)
        for ack in self.health_check_acks:
            self.send({"type": "health", "id": ack})
        self.health_check_acks.clear()
        self.publish_snapshot()

    def process_batch_result_prefill(
        self, batch: ScheduleBatch, result: list[tuple[int, float]]
    ) -> None:
        new_tokens = sum(r.input_len for r in batch.reqs)
        self.realtime_tokens["prefill_compute"] += new_tokens
        self.running_batch.extend(batch.reqs)
        self._append_tokens(batch.reqs, result)
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
        if self._decode_steps % DECODE_LOG_INTERVAL == 0:
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
            "num_paused_reqs": len(self.waiting_queue) + len(self.running_batch)
            if self.engine_paused
            else 0,
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

    def publish_snapshot(self) -> None:
        self._last_snapshot = time.time()
        self.send(
            {
                "type": "snapshot",
                "ts": self._last_snapshot,
                "load": self.load(),
                "gauges": self.gauges,
                "realtime_tokens": dict(self.realtime_tokens),
                "forward_execution_seconds": self.forward_seconds,
                "weight_load_duration": dict(self.weight_load_duration),
            }
        )

    # ---- request handlers
    def handle_generate_request(self, req: Msg) -> Msg | None:
        if req.get("health") and not self.is_fully_idle():
            self.health_check_acks.append(str(req.get("rid")))
            return None
        max_new = max(int(req.get("max_new_tokens", 16)), 1)
        rid = str(req["rid"])
        target = 1 if req.get("health") else target_length(rid, max_new)
        self.waiting_queue.append(
            Req(
                rid=rid,
                input_len=max(int(req.get("input_len", 1)), 1),
                max_new_tokens=max_new,
                target_len=target,
                return_logprob=bool(req.get("return_logprob")),
                health=bool(req.get("health")),
            )
        )
        return None

    def abort_request(self, req: Msg) -> Msg | None:
        rid = req.get("rid")
        abort_all = bool(req.get("abort_all"))
        for queued in list(self.waiting_queue):
            if abort_all or queued.rid == rid:
                self.waiting_queue.remove(queued)
                self.finish(queued, {"type": "abort", "message": "Abort in waiting queue"})
        for running in list(self.running_batch):
            if abort_all or running.rid == rid:
                self.finish(running, {"type": "abort", "message": "Abort before decode"})
        self.publish_snapshot()
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
        self.engine_paused = True
        if req.get("mode") == "retract":
            self.num_retracted += len(self.running_batch)
            for r in reversed(self.running_batch):
                self.waiting_queue.appendleft(r)
            self.running_batch.clear()
        self.publish_snapshot()
        return None

    def continue_generation(self, req: Msg) -> Msg | None:
        self.engine_paused = False
        logger.info(
            "[continue_generation] torch.cuda.empty_cache() called: reserved 0.00 MB -> 0.00 MB "
            "(freed 0.00 MB)"
        )
        return None

    def init_weights_update_group(self, req: Msg) -> Msg | None:
        success, message = self.tp_worker.init_weights_update_group(req)
        return {"success": success, "message": message}

    def destroy_weights_update_group(self, req: Msg) -> Msg | None:
        success, message = self.tp_worker.destroy_weights_update_group(req)
        return {"success": success, "message": message}

    def update_weights_from_distributed(self, req: Msg) -> Msg | None:
        tic = time.perf_counter()
        success, message = self.tp_worker.update_weights_from_distributed(req)
        return self._after_weight_update(req, success, message, "distributed", tic)

    def update_weights_from_tensor(self, req: Msg) -> Msg | None:
        tic = time.perf_counter()
        success, message = self.tp_worker.update_weights_from_tensor(req)
        return self._after_weight_update(req, success, message, "tensor", tic)

    def _after_weight_update(
        self, req: Msg, success: bool, message: str, source: str, tic: float
    ) -> Msg:
        if success and req.get("flush_cache", True):
            flushed = self.flush_cache()
            assert flushed["success"], "Cache flush failed after updating weights"
        self.weight_load_duration[source] = time.perf_counter() - tic
        self.refresh_gauges()
        self.publish_snapshot()
        return {"success": success, "message": message}

    def release_memory_occupation(self, req: Msg) -> Msg | None:
        assert self.is_fully_idle(), (
            "release_memory_occupation should be called only when server is idle."
        )
        tags = req.get("tags") or ["weights", "kv_cache", "cuda_graph"]
        self.offload_tags |= set(map(str, tags))
        return {"success": True}

    def resume_memory_occupation(self, req: Msg) -> Msg | None:
        tags = req.get("tags") or ["weights", "kv_cache", "cuda_graph"]
        self.offload_tags -= set(map(str, tags))
        return {"success": True}


# --------------------------------------------------------------------------- entry points


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


def run_scheduler_process(conn: Connection, parent_pid: int) -> None:
    """Read the config message, announce readiness, run the loop; crash like SGLang on exceptions."""
    try:
        cfg = recv_msg(conn)
    except (EOFError, OSError, ValueError):
        os._exit(1)
    title = str(cfg.get("title") or "sglang::scheduler")
    setup_logging(log_prefix(title))
    try:
        scheduler = Scheduler(conn, cfg)
        log_startup(scheduler)
        scheduler.send(
            {
                "type": "ready",
                "status": "ready",
                "max_total_num_tokens": scheduler.max_total_num_tokens,
                "max_req_input_len": scheduler.max_total_num_tokens - 1,
            }
        )
        scheduler.run_event_loop()
    except Exception:
        logger.error("Scheduler hit an exception: %s", traceback.format_exc())
        try:
            os.kill(parent_pid, signal.SIGQUIT)
        except OSError:
            pass
        os._exit(1)


def run_detokenizer_process(parent_pid: int) -> None:
    """The `sglang::detokenizer` child: present in the process tree, idle (outputs go direct)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os._exit(0)


def _argv0() -> str:
    """The process title as /proc shows it (argv[0] of the exec, which `-m` hides from sys.argv)."""
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            return fh.read().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="SGLang stand-in scheduler (internal)")
    parser.add_argument("--role", choices=("scheduler", "detokenizer"), default="scheduler")
    parser.add_argument("--fd", type=int, default=-1)
    parser.add_argument("--parent-pid", type=int, required=True)
    args = parser.parse_args(argv)
    if not sys.executable:
        try:
            sys.executable = os.readlink("/proc/self/exe")
        except OSError:
            pass
    title = _argv0()
    set_process_name(title or f"sglang::{args.role}")
    die_with_parent(args.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the HTTP process, not us
    if args.role == "detokenizer":
        run_detokenizer_process(args.parent_pid)
        return
    conn = Connection(args.fd)
    run_scheduler_process(conn, args.parent_pid)


if __name__ == "__main__":
    main()

"""The stand-in SGLang HTTP/tokenizer process (as `sglang/srt/entrypoints/http_server.py`).

A stand-in for one SGLang engine (0.5.15.post1 + slime's patches), for the demo job and tests.

It speaks the HTTP protocol of reference/sglang.md: the same paths, methods, status codes, bodies,
Prometheus metric names and API-key rules. Like the real engine it is two processes (plus an idle
`sglang::detokenizer`): this HTTP/tokenizer process, and a single-threaded scheduler child whose
cmdline starts with `sglang::scheduler_TP0` (module `sglang_scheduler`). Control calls round-trip to
the scheduler with no server-side timeout, so a stuck scheduler makes them hang, while `/model_info`,
`/v1/models`, `/metrics`, `/v1/loads` and `/get_load` still answer from the last published snapshot
(frozen values). `/server_info` gives `internal_states: []` after `SGLANG_SERVER_INFO_TIMEOUT` (2 s).

Command line::

    python -m slime_hangdoctor.demo.sglang_server --host 127.0.0.1 --port P [--api-key K]
        [--admin-api-key K] [--fault NAME] [--fault-after-s S] [--request-log FILE]
        [--model-path demo/model] [--served-model-name NAME] [--step-s 0.02] [--load-s 0]
        [--scheduler-title sglang::scheduler_TP0] [--exit-with-parent]

Faults (armed `--fault-after-s` seconds after start):

- `never_healthy`: the server stays Starting: `/health` and `/health_generate` answer 503 at once.
- `stuck_scheduler`: the next decode step blocks forever inside `forward_decode` (requests stay in
  flight, counters freeze, control calls hang).
- `skip_weight_sync`: the scheduler never joins the weight-update group (it dials a port nobody
  listens on) and never receives a broadcast: `/init_weights_update_group` and
  `/update_weights_from_distributed` hang, the trainer waits in its rendezvous / broadcast.
- `hang_update_weights_from_tensor`: the colocated update never returns.
`never_healthy` ignores `--fault-after-s`.

Where it differs from a real engine: one DP rank and one TP rank; no streaming, no batch input on
`/generate` (400); token ids and text are deterministic filler; a forward step is a sleep; weight
groups use gloo whatever `backend` says; `flattened_bucket` broadcasts one flat tensor of the first
dtype; `/update_weights_from_tensor` accepts any strings (no CUDA IPC); the `sglang::detokenizer`
child is idle (outputs go scheduler -> HTTP directly). Kept on purpose, as in SGLang: metric gauges
refresh only at prefill, every 40 decode steps and every 30 s idle (so `num_running_reqs` can stay
stale after requests end), counters move only while generating, and `/health` runs a 1-token
generation through the pause gate and the update lock.

Python API: `launch_server(argv)` runs the server in the calling process (blocking), which is what
slime's `launch_server_process` does in a multiprocessing spawn child of the SGLangEngine actor.
"""

from __future__ import annotations

import argparse
import hmac
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from slime_hangdoctor.demo.sglang.srt.managers.io_struct import FAULTS, recv_msg, send_msg

VERSION = "0.5.15.post1"
SCHEDULER_MODULE = "slime_hangdoctor.demo.sglang_scheduler"
MAX_BODY = 256 * 2**20
VOCAB = (
    "the",
    "answer",
    "is",
    "so",
    "we",
    "get",
    "then",
    "step",
    "thus",
    "and",
    "=",
    "+",
    "1",
    "2",
)

Msg = dict[str, Any]
Reply = tuple[int, str, bytes]  # status, content type, body

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
PROM = "text/plain; version=0.0.4; charset=utf-8"

logger = logging.getLogger("sglang_standin.http")


# --------------------------------------------------------------------------- arguments


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m slime_hangdoctor.demo.sglang_server",
        description="Stand-in for one SGLang 0.5.15 engine (HTTP + scheduler child).",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--api-key", default=None)
    p.add_argument("--admin-api-key", default=None)
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--fault-after-s", type=float, default=0.0)
    p.add_argument("--request-log", default=None, help="append one JSON line per request")
    p.add_argument("--model-path", default="demo/model")
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--context-length", type=int, default=4096)
    p.add_argument("--max-total-tokens", type=int, default=65536)
    p.add_argument("--max-running-requests", type=int, default=64)
    p.add_argument("--step-s", type=float, default=0.02, help="seconds per forward step")
    p.add_argument("--load-s", type=float, default=0.0, help="model-load time before listening")
    p.add_argument("--weight-sync-timeout-s", type=float, default=1800.0)
    p.add_argument("--scheduler-title", default="sglang::scheduler_TP0")
    p.add_argument("--enable-memory-saver", action="store_true")
    p.add_argument("--skip-server-warmup", action="store_true", default=True)
    p.add_argument("--random-seed", type=int, default=42)
    p.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="not an SGLang flag: exit (with the scheduler) when this process is orphaned, so a "
        "killed demo actor leaves no engine behind",
    )
    return p.parse_args(argv)


def build_server_args(ns: argparse.Namespace) -> Msg:
    """The `dataclasses.asdict(server_args)` part of `/server_info` (a representative subset)."""
    served = ns.served_model_name or ns.model_path
    return {
        "model_path": ns.model_path,
        "tokenizer_path": ns.model_path,
        "tokenizer_mode": "auto",
        "skip_tokenizer_init": False,
        "load_format": "auto",
        "trust_remote_code": False,
        "context_length": ns.context_length,
        "is_embedding": False,
        "host": ns.host,
        "port": ns.port,
        "skip_server_warmup": True,
        "dtype": "auto",
        "kv_cache_dtype": "auto",
        "mem_fraction_static": 0.8,
        "max_running_requests": ns.max_running_requests,
        "max_total_tokens": ns.max_total_tokens,
        "chunked_prefill_size": 8192,
        "max_prefill_tokens": 16384,
        "schedule_policy": "fcfs",
        "device": "cuda",
        "tp_size": ns.tp_size,
        "pp_size": 1,
        "dp_size": 1,
        "ep_size": 1,
        "random_seed": ns.random_seed,
        "watchdog_timeout": 300,
        "soft_watchdog_timeout": None,
        "base_gpu_id": 0,
        "log_level": "info",
        "log_level_http": None,
        "enable_metrics": True,
        "enable_metrics_for_all_schedulers": False,
        "decode_log_interval": 40,
        "api_key": ns.api_key,
        "admin_api_key": ns.admin_api_key,
        "served_model_name": served,
        "weight_version": "default",
        "enable_memory_saver": bool(ns.enable_memory_saver),
        "disable_overlap_schedule": False,
        "dist_init_addr": None,
        "nnodes": 1,
        "node_rank": 0,
        "crash_dump_folder": None,
    }


# --------------------------------------------------------------------------- small sync primitives


@dataclass
class Slot:
    """One awaited answer from the scheduler."""

    event: threading.Event
    value: Any = None

    @classmethod
    def new(cls) -> Slot:
        return cls(threading.Event())

    def put(self, value: Any) -> None:
        self.value = value
        self.event.set()


class RWLock:
    """`model_update_lock`: generate requests read, non-paused weight updates write (writer first)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.readers = 0
        self._writer = False
        self._waiting_writers = 0

    def acquire_read(self, cancel: threading.Event | None = None) -> bool:
        with self._cond:
            while self._writer or self._waiting_writers:
                self._cond.wait(0.5)
                if cancel is not None and cancel.is_set():
                    return False
            self.readers += 1
            return True

    def release_read(self) -> None:
        with self._cond:
            self.readers -= 1
            self._cond.notify_all()

    @contextmanager
    def writer(self) -> Iterator[None]:
        with self._cond:
            self._waiting_writers += 1
            while self._writer or self.readers:
                self._cond.wait()
            self._waiting_writers -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


# --------------------------------------------------------------------------- tokenizer manager


class TokenizerManager:
    """The HTTP-side state: pause gate, update lock, scheduler channel, snapshot, counters."""

    def __init__(self, ns: argparse.Namespace) -> None:
        self.ns = ns
        self.server_args = build_server_args(ns)
        self.served_model_name = str(self.server_args["served_model_name"])
        self.started_at = time.time()
        self.server_status = "Starting"
        self.gracefully_exit = False
        self.weight_version = "default"
        self.is_pause = False
        self.is_pause_cond = threading.Condition()
        self.model_update_lock = RWLock()
        self.last_receive_tstamp = 0.0
        self.scheduler_info: Msg = {}
        self.snapshot: Msg = {}
        self.counters = {
            "prompt_tokens": 0.0,
            "generation_tokens": 0.0,
            "num_requests": 0.0,
            "cached_tokens": 0.0,
            "num_aborted_requests": 0.0,
        }
        self.e2e_latency: list[float] = []
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._pending: dict[str, Slot] = {}
        self._rid_waiters: dict[str, Slot] = {}
        self._internal_waiters: deque[Slot] = deque()
        self._ready = threading.Event()
        self._log_lock = threading.Lock()
        self.children: list[subprocess.Popen[bytes]] = []
        self.conn: Connection | None = None
        self.signals_installed = False
        self.health_timeout = int(os.getenv("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
        self.server_info_timeout = float(os.getenv("SGLANG_SERVER_INFO_TIMEOUT", "2"))
        self.health_generation = os.getenv(
            "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true"
        ).lower() not in ("0", "false", "no", "off")

    # ---- subprocesses
    def start_subprocesses(self) -> None:
        """Start scheduler and detokenizer from the calling thread (PDEATHSIG follows that thread)."""
        parent, child = socket.socketpair()
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[len(__name__.split(".")) - 1])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        common = ["-m", SCHEDULER_MODULE, "--parent-pid", str(os.getpid())]
        fd = child.fileno()
        scheduler = subprocess.Popen(  # noqa: S603 - our own module, fixed argv
            [self.ns.scheduler_title, *common, "--fd", str(fd)],
            executable=sys.executable,
            pass_fds=(fd,),
            env=env,
            stdin=subprocess.DEVNULL,
        )
        child.close()
        self.children.append(scheduler)
        detokenizer = subprocess.Popen(  # noqa: S603
            ["sglang::detokenizer", *common, "--role", "detokenizer"],
            executable=sys.executable,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        self.children.append(detokenizer)
        self.conn = Connection(parent.detach())
        self.send(
            {
                "type": "config",
                "title": self.ns.scheduler_title,
                "server_args": self.server_args,
                "fault": self.ns.fault,
                "fault_at": self.started_at + max(self.ns.fault_after_s, 0.0),
                "step_s": self.ns.step_s,
                "max_total_num_tokens": self.ns.max_total_tokens,
                "max_running_requests": self.ns.max_running_requests,
                "weight_sync_timeout_s": self.ns.weight_sync_timeout_s,
            }
        )
        threading.Thread(target=self._reader, name="tokenizer-handle-loop", daemon=True).start()

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def kill_children(self) -> None:
        for proc in self.children:
            if proc.poll() is None:
                proc.kill()
        for proc in self.children:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    # ---- channel
    def send(self, msg: Msg) -> None:
        if self.conn is not None:
            send_msg(self.conn, self._send_lock, msg)

    def _reader(self) -> None:
        assert self.conn is not None
        while True:
            try:
                msg = recv_msg(self.conn)
            except (EOFError, OSError, ValueError):
                return  # the subprocess watchdog reports the death
            self.handle_loop_message(msg)

    def handle_loop_message(self, msg: Msg) -> None:
        kind = msg.get("type")
        if kind == "snapshot":
            self.snapshot = msg  # shared-memory LoadSnapshot: does not count as a heartbeat
            return
        self.last_receive_tstamp = time.time()
        if kind == "ready":
            self.scheduler_info = {k: v for k, v in msg.items() if k != "type"}
            self._ready.set()
        elif kind == "output":
            with self._lock:
                slot = self._rid_waiters.pop(str(msg.get("rid")), None)
            if slot is not None:
                slot.put(msg)
        elif kind == "reply":
            reply_id = str(msg.get("id"))
            with self._lock:
                if reply_id.startswith("internal-"):
                    # FanOutCommunicator in queueing mode: answers go to waiters in FIFO order,
                    # so a late answer is handed to the next caller.
                    slot = self._internal_waiters.popleft() if self._internal_waiters else None
                else:
                    slot = self._pending.pop(reply_id, None)
            if slot is not None:
                slot.put(msg.get("result"))

    def roundtrip(self, msg: Msg) -> Any:
        """Send a control request and wait for its answer, with no timeout (as SGLang)."""
        slot = Slot.new()
        req_id = uuid.uuid4().hex
        with self._lock:
            self._pending[req_id] = slot
        self.send({**msg, "id": req_id})
        slot.event.wait()
        return slot.value

    # ---- generation
    def generate_request(
        self, req: Msg, cancel: threading.Event | None = None, log_metrics: bool = True
    ) -> Msg | None:
        """Pass the pause gate and the reader lock, run on the scheduler, wait for the output."""
        if not self._pass_pause_gate(cancel):
            return None
        if not self.model_update_lock.acquire_read(cancel):
            return None
        try:
            slot = Slot.new()
            rid = str(req["rid"])
            with self._lock:
                self._rid_waiters[rid] = slot
            tic = time.time()
            self.send({"type": "generate", **req})
            while not slot.event.wait(0.5):
                if cancel is not None and cancel.is_set():
                    with self._lock:
                        self._rid_waiters.pop(rid, None)
                    self.send({"type": "abort", "rid": rid})
                    return None
            out: Msg = slot.value
            if log_metrics:
                self._count_finished(out, time.time() - tic)
            return out
        finally:
            self.model_update_lock.release_read()

    def _pass_pause_gate(self, cancel: threading.Event | None) -> bool:
        while True:
            with self.is_pause_cond:
                if self.is_pause_cond.wait_for(lambda: not self.is_pause, timeout=0.5):
                    return True
            if cancel is not None and cancel.is_set():
                return False

    def _count_finished(self, out: Msg, latency: float) -> None:
        with self._lock:
            self.counters["prompt_tokens"] += float(out.get("prompt_tokens") or 0)
            self.counters["generation_tokens"] += float(len(out.get("output_ids") or []))
            self.counters["num_requests"] += 1
            if (out.get("finish_reason") or {}).get("type") == "abort":
                self.counters["num_aborted_requests"] += 1
            self.e2e_latency.append(latency)

    def health_check(self, path: str) -> int:
        if self.gracefully_exit:
            logger.info("Health check request received during shutdown. Returning 503.")
            return 503
        if self.server_status == "Starting":
            return 503
        if path == "/health" and not self.health_generation:
            return 200
        tic = time.time()
        cancel = threading.Event()
        req = {
            "rid": f"HEALTH_CHECK_{uuid.uuid4().hex}",
            "input_len": 1,
            "max_new_tokens": 1,
            "health": True,
        }
        threading.Thread(
            target=self.generate_request, args=(req, cancel, False), daemon=True
        ).start()
        for _ in range(self.health_timeout):
            time.sleep(1)
            if self.last_receive_tstamp > tic:
                cancel.set()
                self.server_status = "Up"
                return 200
        cancel.set()
        logger.error(
            "Health check failed. Server couldn't get a response from detokenizer for last %d "
            "seconds. tic start time: %s. last_heartbeat time: %s",
            self.health_timeout,
            time.strftime("%H:%M:%S", time.localtime(tic)),
            time.strftime("%H:%M:%S", time.localtime(self.last_receive_tstamp)),
        )
        self.server_status = "UnHealthy"
        return 503

    # ---- control
    def get_internal_state(self) -> list[Msg]:
        slot = Slot.new()
        with self._lock:
            self._internal_waiters.append(slot)
        self.send({"type": "get_internal_state", "id": f"internal-{uuid.uuid4().hex}"})
        if slot.event.wait(self.server_info_timeout):
            states = (slot.value or {}).get("states") or []
            return [s for s in states if isinstance(s, dict)]
        with self._lock:
            try:
                self._internal_waiters.remove(slot)
            except ValueError:
                pass
        logger.warning(
            "Timed out getting internal state for /server_info after %.1fs; returning empty "
            "internal_states",
            self.server_info_timeout,
        )
        return []

    def pause_generation(self, mode: str) -> None:
        with self.is_pause_cond:
            self.is_pause = True
        if mode == "abort":
            while self.model_update_lock.readers > 0:
                self.send({"type": "abort", "abort_all": True})
                time.sleep(1.0)
        else:
            self.send({"type": "pause_generation", "mode": mode})

    def continue_generation(self) -> None:
        with self.is_pause_cond:
            self.is_pause = False
            self.is_pause_cond.notify_all()
        self.send({"type": "continue_generation"})

    def weight_update(self, msg: Msg) -> Msg:
        """Paused: run while holding the pause lock; else take the writer side of the update lock."""
        if msg.get("abort_all_requests"):
            self.send({"type": "abort", "abort_all": True})
        with self.is_pause_cond:
            if self.is_pause:
                return self._weight_update_roundtrip(msg)
        with self.model_update_lock.writer():
            return self._weight_update_roundtrip(msg)

    def _weight_update_roundtrip(self, msg: Msg) -> Msg:
        result = dict(self.roundtrip(msg) or {})
        version = msg.get("weight_version")
        if result.get("success") and version is not None:
            self.weight_version = str(version)
            self.server_args["weight_version"] = str(version)
            result["message"] = f"{result.get('message', '')} Weight version updated to {version}."
        return result

    # ---- request log
    def log_request(self, method: str, path: str, query: str, client: str) -> None:
        if not self.ns.request_log:
            return
        line = json.dumps(
            {"t": time.time(), "method": method, "path": path, "query": query, "client": client}
        )
        with self._log_lock:
            try:
                with open(self.ns.request_log, "a", encoding="utf-8") as fh:
                    fh.write(line + "\n")
            except OSError as exc:
                logger.warning("cannot write the request log: %s", exc)


# --------------------------------------------------------------------------- bodies


def _json_reply(status: int, obj: Any) -> Reply:
    return status, JSON, json.dumps(obj).encode("utf-8")


def _not_found() -> Reply:
    return _json_reply(404, {"detail": "Not Found"})


def _missing_body() -> Reply:
    return _json_reply(
        422,
        {"detail": [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": None}]},
    )


class BodyError(Exception):
    def __init__(self, reply: Reply) -> None:
        super().__init__("bad body")
        self.reply = reply


def json_body(raw: bytes, *, required: bool) -> Msg:
    if not raw.strip():
        if required:
            raise BodyError(_missing_body())
        return {}
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BodyError(
            _json_reply(
                422,
                {
                    "detail": [
                        {
                            "type": "json_invalid",
                            "loc": ["body", 0],
                            "msg": f"JSON decode error: {exc}",
                        }
                    ]
                },
            )
        ) from exc
    if not isinstance(obj, dict):
        raise BodyError(
            _json_reply(
                422,
                {
                    "detail": [
                        {
                            "type": "model_attributes_type",
                            "loc": ["body"],
                            "msg": "Input should be a valid dictionary",
                        }
                    ]
                },
            )
        )
    return obj


def model_config(model_path: str) -> tuple[str, list[str]]:
    try:
        cfg = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8"))
        model_type = str(cfg.get("model_type") or "qwen2")
        archs = [str(a) for a in cfg.get("architectures") or []] or ["Qwen2ForCausalLM"]
        return model_type, archs
    except (OSError, ValueError, AttributeError):
        return "qwen2", ["Qwen2ForCausalLM"]


def detokenize(ids: list[int]) -> str:
    return "".join(f" {VOCAB[i % len(VOCAB)]}" for i in ids if i != 2)


# --------------------------------------------------------------------------- endpoints


Handler = Callable[[TokenizerManager, str, str, bytes], Reply]
NORMAL, ADMIN_OPTIONAL = "normal", "admin_optional"


def ep_health(tm: TokenizerManager, method: str, query: str, raw: bytes, path: str) -> Reply:
    return tm.health_check(path), TEXT, b""


def ep_model_info(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    model_type, archs = model_config(tm.ns.model_path)
    return _json_reply(
        200,
        {
            "model_path": tm.ns.model_path,
            "tokenizer_path": tm.ns.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": tm.weight_version,
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": model_type,
            "architectures": archs,
        },
    )


def ep_server_info(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    states = tm.get_internal_state()
    return _json_reply(
        200,
        {
            **tm.server_args,
            **tm.scheduler_info,
            "internal_states": states,
            "version": VERSION,
            "kv_events": None,
        },
    )


def ep_v1_models(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    return _json_reply(
        200,
        {
            "object": "list",
            "data": [
                {
                    "id": tm.served_model_name,
                    "object": "model",
                    "created": int(tm.started_at),
                    "owned_by": "sglang",
                    "root": tm.ns.model_path,
                    "max_model_len": tm.ns.context_length,
                }
            ],
        },
    )


_CORE_LOAD_KEYS = (
    "dp_rank",
    "num_running_reqs",
    "num_waiting_reqs",
    "num_waiting_uncached_tokens",
    "num_used_tokens",
    "num_total_tokens",
    "max_total_num_tokens",
    "max_running_requests",
    "token_usage",
    "gen_throughput",
    "cache_hit_rate",
    "utilization",
)


def ep_v1_loads(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    params = parse_qs(query)
    include = {x for v in params.get("include", ["core"]) for x in v.split(",") if x}
    load: Msg = dict(tm.snapshot.get("load") or {})
    entry: Msg = {k: load.get(k, 0) for k in _CORE_LOAD_KEYS}
    if include & {"memory", "all"}:
        entry["memory"] = {
            "weight_gb": 0.5,
            "kv_cache_gb": round(tm.ns.max_total_tokens * 2 / 2**20, 3),
            "graph_gb": 0.0,
            "token_capacity": tm.ns.max_total_tokens,
        }
    if include & {"queues", "all"}:
        entry["queues"] = {
            "waiting": load.get("num_waiting_reqs", 0),
            "grammar": 0,
            "paused": load.get("num_paused_reqs", 0),
            "retracted": load.get("num_retracted_reqs", 0),
        }
    loads = [entry]
    if "dp_rank" in params and params["dp_rank"][0] != "0":
        loads = []
    return _json_reply(
        200,
        {"timestamp": datetime.now(timezone.utc).isoformat(), "version": VERSION, "loads": loads},
    )


def ep_get_load(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    load: Msg = dict(tm.snapshot.get("load") or {})
    running = int(load.get("num_running_reqs", 0))
    waiting = int(load.get("num_waiting_reqs", 0))
    return _json_reply(
        200,
        [
            {
                "dp_rank": 0,
                "num_reqs": running + waiting,
                "num_waiting_reqs": waiting,
                "num_tokens": int(load.get("num_used_tokens", 0)),
                "num_pending_tokens": int(load.get("num_waiting_uncached_tokens", 0)),
                "ts_tic": float(tm.snapshot.get("ts") or 0.0),
            }
        ],
    )


def ep_weight_version(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    return _json_reply(200, {"weight_version": tm.weight_version})


def ep_metrics(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    return 200, PROM, render_metrics(tm).encode("utf-8")


def ep_generate(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    obj = json_body(raw, required=True)
    text, input_ids = obj.get("text"), obj.get("input_ids")
    if text is None and input_ids is None:
        return _json_reply(
            400,
            {"error": {"message": "Either text, input_ids or input_embeds should be provided."}},
        )
    if isinstance(text, list) or (
        isinstance(input_ids, list) and input_ids and isinstance(input_ids[0], list)
    ):
        return _json_reply(
            400, {"error": {"message": "batch input is not supported by the stand-in"}}
        )
    if input_ids is not None:
        input_len = len(input_ids) if isinstance(input_ids, list) else 1
    else:
        input_len = max(len(str(text).encode("utf-8")) // 4, 1)
    params = obj.get("sampling_params") or {}
    max_new = int(params.get("max_new_tokens", 128)) if isinstance(params, dict) else 128
    rid = str(obj.get("rid") or uuid.uuid4().hex)
    tic = time.time()
    out = tm.generate_request(
        {
            "rid": rid,
            "input_len": input_len,
            "max_new_tokens": max_new,
            "return_logprob": bool(obj.get("return_logprob")),
        }
    )
    assert out is not None
    ids = [int(i) for i in out.get("output_ids") or []]
    meta: Msg = {
        "id": rid,
        "finish_reason": out.get("finish_reason"),
        "prompt_tokens": input_len,
        "weight_version": tm.weight_version,
        "total_retractions": 0,
        "completion_tokens": len(ids),
        "cached_tokens": 0,
        "e2e_latency": round(time.time() - tic, 4),
    }
    if obj.get("return_logprob"):
        logprobs = out.get("logprobs") or []
        meta["output_token_logprobs"] = [
            [lp, tok, None] for lp, tok in zip(logprobs, ids, strict=False)
        ]
    return _json_reply(200, {"text": detokenize(ids), "output_ids": ids, "meta_info": meta})


def ep_flush_cache(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    timeout = parse_qs(query).get("timeout", [None])[0]
    msg: Msg = {"type": "flush_cache"}
    if timeout:
        try:
            msg["timeout"] = float(timeout)
        except ValueError:
            return _json_reply(
                422, {"detail": [{"type": "float_parsing", "loc": ["query", "timeout"]}]}
            )
    result = tm.roundtrip(msg) or {}
    if result.get("success"):
        return (
            200,
            TEXT,
            b"Cache flushed.\nPlease check backend logs for more details. (When there are running "
            b"or waiting requests, the operation will not be performed.)\n",
        )
    return 400, TEXT, (str(result.get("message") or "") or "Flush cache failed.\n").encode()


def ep_pause(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    obj = json_body(raw, required=True)
    mode = str(obj.get("mode") or "abort")
    if mode not in ("abort", "retract", "in_place"):
        return _json_reply(422, {"detail": [{"type": "literal_error", "loc": ["body", "mode"]}]})
    tm.pause_generation(mode)
    return _json_reply(200, {"message": "Generation paused successfully.", "status": "ok"})


def ep_continue(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    json_body(raw, required=True)
    tm.continue_generation()
    return _json_reply(200, {"message": "Generation continued successfully.", "status": "ok"})


def ep_abort(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    obj = json_body(raw, required=True)
    rid, abort_all = obj.get("rid") or "", bool(obj.get("abort_all"))
    if not rid and not abort_all:
        logger.warning("abort_request with an empty rid and abort_all=False is ignored")
    else:
        tm.send({"type": "abort", "rid": rid or None, "abort_all": abort_all})
    return 200, TEXT, b""


def _success_reply(result: Msg) -> Reply:
    ok = bool(result.get("success"))
    return _json_reply(
        200 if ok else 400, {"success": ok, "message": str(result.get("message", ""))}
    )


def ep_init_group(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    obj = json_body(raw, required=True)
    return _success_reply(tm.roundtrip({**obj, "type": "init_weights_update_group"}) or {})


def ep_destroy_group(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    obj = json_body(raw, required=False)
    return _success_reply(tm.roundtrip({**obj, "type": "destroy_weights_update_group"}) or {})


def ep_update_distributed(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    obj = json_body(raw, required=True)
    if "flush_cache" not in obj:
        obj["flush_cache"] = True
    return _success_reply(tm.weight_update({**obj, "type": "update_weights_from_distributed"}))


def ep_update_tensor(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    obj = json_body(raw, required=True)
    if "flush_cache" not in obj:
        obj["flush_cache"] = True
    return _success_reply(tm.weight_update({**obj, "type": "update_weights_from_tensor"}))


def ep_release(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    obj = json_body(raw, required=False)
    tm.roundtrip({"type": "release_memory_occupation", "tags": obj.get("tags")})
    return _json_reply(200, None)


def ep_resume(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
    obj = json_body(raw, required=False)
    tm.roundtrip({"type": "resume_memory_occupation", "tags": obj.get("tags")})
    return _json_reply(200, None)


@dataclass(frozen=True)
class Route:
    methods: tuple[str, ...]
    fn: Handler
    auth: str = NORMAL
    deprecated_for: str | None = None


def _health(path: str) -> Handler:
    def handler(tm: TokenizerManager, method: str, query: str, raw: bytes) -> Reply:
        return ep_health(tm, method, query, raw, path)

    return handler


_GET, _POST, _BOTH = ("GET",), ("POST",), ("GET", "POST")
ROUTES: dict[str, Route] = {
    "/health": Route(_GET, _health("/health")),
    "/health_generate": Route(_GET, _health("/health_generate")),
    "/model_info": Route(_GET, ep_model_info),
    "/get_model_info": Route(_GET, ep_model_info, deprecated_for="/model_info"),
    "/server_info": Route(_GET, ep_server_info),
    "/get_server_info": Route(_GET, ep_server_info, deprecated_for="/server_info"),
    "/v1/models": Route(_GET, ep_v1_models),
    "/v1/loads": Route(_GET, ep_v1_loads),
    "/get_load": Route(_GET, ep_get_load),
    "/get_weight_version": Route(_GET, ep_weight_version),
    "/weight_version": Route(_GET, ep_weight_version),
    "/metrics": Route(_GET, ep_metrics),
    "/generate": Route(("POST", "PUT"), ep_generate),
    "/flush_cache": Route(_BOTH, ep_flush_cache, ADMIN_OPTIONAL),
    "/pause_generation": Route(_POST, ep_pause, ADMIN_OPTIONAL),
    "/continue_generation": Route(_POST, ep_continue, ADMIN_OPTIONAL),
    "/abort_request": Route(_POST, ep_abort, ADMIN_OPTIONAL),
    "/init_weights_update_group": Route(_POST, ep_init_group, ADMIN_OPTIONAL),
    "/destroy_weights_update_group": Route(_POST, ep_destroy_group, ADMIN_OPTIONAL),
    "/update_weights_from_distributed": Route(_POST, ep_update_distributed, ADMIN_OPTIONAL),
    "/update_weights_from_tensor": Route(_POST, ep_update_tensor, ADMIN_OPTIONAL),
    "/release_memory_occupation": Route(_BOTH, ep_release, ADMIN_OPTIONAL),
    "/resume_memory_occupation": Route(_BOTH, ep_resume, ADMIN_OPTIONAL),
}


def auth_failure(tm: TokenizerManager, method: str, path: str, header: str | None) -> Reply | None:
    """SGLang >=0.5.9 rules: /health*, /metrics and OPTIONS are open; NORMAL needs api_key;
    ADMIN_OPTIONAL needs admin_api_key if set, else api_key if set."""
    if method == "OPTIONS" or path.startswith(("/health", "/metrics")):
        return None
    route = ROUTES.get(path)
    level = route.auth if route is not None else NORMAL
    api_key, admin_key = tm.ns.api_key, tm.ns.admin_api_key
    needed = (admin_key or api_key) if level == ADMIN_OPTIONAL else api_key
    if not needed:
        return None
    token = ""
    if header:
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() == "bearer":
            token = value.strip()
    if hmac.compare_digest(token.encode(), str(needed).encode()):
        return None
    return _json_reply(401, {"error": "Unauthorized"})


# --------------------------------------------------------------------------- /metrics


def render_metrics(tm: TokenizerManager) -> str:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )

    snap = tm.snapshot
    sched_labels = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
    sched_values = [tm.served_model_name, "unified", "0", "0", "0"]
    tok_labels, tok_values = ["model_name", "engine_type"], [tm.served_model_name, "unified"]
    families: list[Any] = []

    gauges: Msg = dict(snap.get("gauges") or {})
    gauge_help = {
        "num_running_reqs": "The number of running requests.",
        "num_queue_reqs": "The number of requests in the waiting queue.",
        "num_grammar_queue_reqs": "The number of requests in the grammar waiting queue.",
        "gen_throughput": "The generation throughput (token/s).",
        "token_usage": "The token usage.",
        "num_used_tokens": "The number of used tokens.",
        "cache_hit_rate": "The prefix cache hit rate.",
        "utilization": "The utilization.",
        "num_retracted_reqs": "The number of retracted requests.",
        "num_paused_reqs": "The number of paused requests by async weight sync.",
        "max_total_num_tokens": "Maximum total number of tokens in the KV cache pool.",
        "is_cuda_graph": "Whether the batch is using CUDA graph.",
        "new_token_ratio": "The new token ratio.",
        "kv_used_tokens": "The number of used KV cache tokens.",
        "kv_available_tokens": "The number of available KV cache tokens.",
    }
    for name, help_text in gauge_help.items():
        g = GaugeMetricFamily(f"sglang:{name}", help_text, labels=sched_labels)
        g.add_metric(sched_values, float(gauges.get(name, 0.0)))
        families.append(g)
    for queue in ("prefill_bootstrap", "prefill_inflight", "decode_prealloc", "decode_transfer"):
        g = GaugeMetricFamily(
            f"sglang:num_{queue}_queue_reqs",
            f"The number of requests in the {queue} queue.",
            labels=sched_labels,
        )
        g.add_metric(sched_values, 0.0)
        families.append(g)
    durations: Msg = dict(snap.get("weight_load_duration") or {})
    if durations:
        g = GaugeMetricFamily(
            "sglang:weight_load_duration_seconds",
            "Duration of the last weight load, by source.",
            labels=[*sched_labels, "source"],
        )
        for source, secs in sorted(durations.items()):
            g.add_metric([*sched_values, source], float(secs))
        families.append(g)

    realtime: Msg = dict(snap.get("realtime_tokens") or {})
    c = CounterMetricFamily(
        "sglang:realtime_tokens", "Realtime token counts by mode.", labels=[*sched_labels, "mode"]
    )
    for mode in ("prefill_compute", "prefill_cache", "decode"):
        c.add_metric([*sched_values, mode], float(realtime.get(mode, 0.0)))
    families.append(c)
    c = CounterMetricFamily(
        "sglang:forward_execution_seconds", "Seconds spent in forward passes.", labels=sched_labels
    )
    c.add_metric(sched_values, float(snap.get("forward_execution_seconds") or 0.0))
    families.append(c)
    c = CounterMetricFamily(
        "sglang:cuda_graph_passes", "Forward passes that used a CUDA graph.", labels=sched_labels
    )
    c.add_metric(sched_values, 0.0)
    families.append(c)

    with tm._lock:
        counters = dict(tm.counters)
        latencies = list(tm.e2e_latency)
    tok_help = {
        "prompt_tokens": "Number of prefill tokens processed.",
        "generation_tokens": "Number of generation tokens processed.",
        "num_requests": "Number of requests processed.",
        "cached_tokens": "Number of cached prompt tokens.",
        "num_aborted_requests": "Number of requests aborted.",
    }
    for name, help_text in tok_help.items():
        c = CounterMetricFamily(f"sglang:{name}", help_text, labels=tok_labels)
        c.add_metric(tok_values, counters[name])
        families.append(c)
    bounds = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
    buckets = [(str(b), float(sum(1 for x in latencies if x <= b))) for b in bounds]
    buckets.append(("+Inf", float(len(latencies))))
    h = HistogramMetricFamily(
        "sglang:e2e_request_latency_seconds",
        "Histogram of end-to-end request latency in seconds",
        labels=tok_labels,
    )
    h.add_metric(tok_values, buckets, sum(latencies))
    families.append(h)

    class _Collector:
        def collect(self) -> Iterator[Any]:
            yield from families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector())
    return str(generate_latest(registry).decode("utf-8"))


# --------------------------------------------------------------------------- HTTP plumbing


class StandinHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], tm: TokenizerManager) -> None:
        self.tm = tm
        super().__init__(address, RequestHandler)


class RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    server: StandinHTTPServer

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_OPTIONS(self) -> None:
        self._dispatch("OPTIONS")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return  # uvicorn-style access lines are written by _access_log

    def _dispatch(self, method: str) -> None:
        tm = self.server.tm
        path, _, query = self.path.partition("?")
        client = f"{self.client_address[0]}:{self.client_address[1]}"
        tm.log_request(method, path, query, client)
        try:
            raw = self._read_body()
        except ValueError:
            self._respond(method, path, (413, TEXT, b"Request Entity Too Large"))
            return
        reply = auth_failure(tm, method, path, self.headers.get("Authorization"))
        if reply is None:
            reply = self._route(tm, method, path, query, raw)
        self._respond(method, path, reply)

    def _route(self, tm: TokenizerManager, method: str, path: str, query: str, raw: bytes) -> Reply:
        route = ROUTES.get(path)
        if route is None:
            return _not_found()
        if method not in route.methods:
            return _json_reply(405, {"detail": "Method Not Allowed"})
        if route.deprecated_for:
            logger.warning(
                "Endpoint '%s' is deprecated and will be removed in a future version. "
                "Please use '%s' instead.",
                path,
                route.deprecated_for,
            )
        try:
            return route.fn(tm, method, query, raw)
        except BodyError as exc:
            return exc.reply
        except Exception as exc:
            logger.exception("error in %s", path)
            return _json_reply(500, {"error": {"message": str(exc)}})

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise ValueError("body too large")
        return self.rfile.read(length) if length > 0 else b""

    def _respond(self, method: str, path: str, reply: Reply) -> None:
        status, ctype, body = reply
        try:
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(body)
            self.wfile.flush()
        except OSError:
            return  # the client went away
        phrase = self.responses.get(status, ("",))[0]
        sys.stderr.write(
            f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{method} '
            f'{self.path} HTTP/1.1" {status} {phrase}\n'
        )


# --------------------------------------------------------------------------- process lifecycle


def _setup_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    )
    root = logging.getLogger("sglang_standin")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False


def _install_signals(tm: TokenizerManager) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be installed from the main thread

    def on_sigquit(signum: int, frame: Any) -> None:
        logger.error(
            "SIGQUIT received. signum=%s, frame=%s. It usually means one child failed.",
            signum,
            frame,
        )
        tm.kill_children()
        os._exit(1)

    def on_sigterm(signum: int, frame: Any) -> None:
        logger.info(
            "SIGTERM received. signum=%s, frame=%s. Draining requests and shutting down...",
            signum,
            frame,
        )
        tm.gracefully_exit = True
        threading.Thread(target=_graceful_exit, args=(tm,), daemon=True).start()

    signal.signal(signal.SIGQUIT, on_sigquit)
    signal.signal(signal.SIGTERM, on_sigterm)
    tm.signals_installed = True


def _graceful_exit(tm: TokenizerManager) -> None:
    deadline = time.time() + 5.0
    while tm.model_update_lock.readers > 0 and time.time() < deadline:
        time.sleep(0.2)
    logger.info(
        "Gracefully exiting... Remaining number of requests %d", tm.model_update_lock.readers
    )
    tm.kill_children()
    os._exit(0)


def _subprocess_watchdog(tm: TokenizerManager) -> None:
    names = ("scheduler", "detokenizer")
    while True:
        time.sleep(1.0)
        for name, proc in zip(names, tm.children, strict=False):
            code = proc.poll()
            if code is not None:
                logger.error(
                    "Subprocess sglang::%s (pid=%d) crashed with exit code %s. Triggering SIGQUIT "
                    "for cleanup...",
                    name,
                    proc.pid,
                    code,
                )
                if tm.signals_installed:
                    os.kill(os.getpid(), signal.SIGQUIT)
                    time.sleep(1.0)
                tm.kill_children()
                os._exit(1)


def _parent_watch(tm: TokenizerManager, parent: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            logger.info("The parent process %d is gone; exiting.", parent)
            tm.kill_children()
            os._exit(0)


def launch_server(args: list[str]) -> None:
    """Run one stand-in engine in this process until it is killed (blocking)."""
    ns = parse_args(list(args))
    _setup_logging()
    tm = TokenizerManager(ns)
    _install_signals(tm)
    tm.start_subprocesses()
    if ns.exit_with_parent:
        threading.Thread(
            target=_parent_watch, args=(tm, os.getppid()), name="parent-watch", daemon=True
        ).start()
    threading.Thread(
        target=_subprocess_watchdog, args=(tm,), name="subprocess-watchdog", daemon=True
    ).start()
    if not tm.wait_ready(60.0):
        logger.error("the scheduler did not start within 60 s")
        tm.kill_children()
        raise SystemExit(1)
    if ns.load_s > 0:
        time.sleep(ns.load_s)
    try:
        server = StandinHTTPServer((ns.host, ns.port), tm)
    except OSError as exc:
        logger.error("cannot listen on %s:%s: %s", ns.host, ns.port, exc)
        tm.kill_children()
        raise SystemExit(1) from exc
    port = server.server_address[1]
    tm.server_args["port"] = port
    sys.stderr.write(
        f"INFO:     Uvicorn running on http://{ns.host}:{port} (Press CTRL+C to quit)\n"
    )
    sys.stderr.write("INFO:     Application startup complete.\n")
    if ns.fault != "never_healthy":
        tm.server_status = "Up"
        logger.info("The server is fired up and ready to roll!")
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        tm.kill_children()


def main(argv: list[str] | None = None) -> None:
    launch_server(sys.argv[1:] if argv is None else argv)

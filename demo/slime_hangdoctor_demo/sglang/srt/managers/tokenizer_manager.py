"""The HTTP-side TokenizerManager of the stand-in (as `sglang/srt/managers/tokenizer_manager.py`).

It owns the pause gate (`is_pause_cond`), the `model_update_lock`, the channel to the scheduler, the
last LoadSnapshot and the tokenizer-side counters, and starts the scheduler and detokenizer children.

The real HTTP process is ONE asyncio event loop (uvicorn running FastAPI, with the TokenizerManager's
`handle_loop` as a task on it: 0.5.15.post1 entrypoints/http_server.py `launch_server` ->
`uvicorn.run`, tokenizer_manager.py `auto_create_handle_loop`): every endpoint, `/metrics`,
`/model_info` and `/health` included, and the reading of the scheduler's outputs run on it, and a
coroutine lets the others run only where it awaits. The stand-in serves each request on a thread
but makes them take turns the same way: `loop` is held while a handler runs, and released only
where the real coroutine awaits (`awaiting()`: the scheduler's answer, the pause condition, the
update lock, a sleep). A handler that blocks without awaiting (fault `blocked_http_loop`) stalls
every endpoint, as a blocked event loop does."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from slime_hangdoctor_demo.sglang.srt.managers.io_struct import recv_msg, send_msg
from slime_hangdoctor_demo.sglang.srt.server_args import (
    build_server_args,
    dist_init_method,
    tp_rank_range,
)

SCHEDULER_MODULE = "slime_hangdoctor_demo.sglang_scheduler"


Msg = dict[str, Any]

logger = logging.getLogger("sglang_standin.http")


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

    def acquire_write(self) -> None:
        with self._cond:
            self._waiting_writers += 1
            while self._writer or self.readers:
                self._cond.wait()
            self._waiting_writers -= 1
            self._writer = True

    def release_write(self) -> None:
        with self._cond:
            self._writer = False
            self._cond.notify_all()


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
        self._late_pause = False
        self._pause_continue_future: Slot | None = None  # fault pause_continue_shared_future
        self.model_update_lock = RWLock()
        self.loop = threading.Lock()  # the one event loop (see the module docstring)
        self._on_loop = threading.local()
        self.last_receive_tstamp = 0.0
        self.scheduler_info: Msg = {}
        self.snapshot: Msg = {}  # the last LoadSnapshot
        self.scheduler_metrics: Msg = {}  # the scheduler's last Prometheus values
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
        # get_internal_state's FanOutCommunicator in "queueing" mode (0.5.15.post1
        # managers/communicator.py:32-34): the call in flight, and the callers queued behind it.
        self._internal_result: Slot | None = None
        self._internal_ready: deque[threading.Event] = deque()
        # The HTTP middleware's series (0.5.15.post1 utils/common.py:2313-2372,
        # add_prometheus_track_response_middleware): by (endpoint, method) and
        # (endpoint, method, status_code); the endpoint label is the route's path.
        self.http_requests: dict[tuple[str, str], float] = {}
        self.http_responses: dict[tuple[str, str, str], float] = {}
        self.http_active: dict[tuple[str, str], float] = {}
        self._ready = threading.Event()
        self._log_lock = threading.Lock()
        self.children: list[subprocess.Popen[bytes]] = []
        self.child_names: list[str] = []
        self.tp_conns: list[Connection] = []
        self.conn: Connection | None = None
        self.detok_conn: Connection | None = None  # the detokenizer's outputs
        self.signals_installed = False
        self.health_timeout = int(os.getenv("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
        self.server_info_timeout = float(os.getenv("SGLANG_SERVER_INFO_TIMEOUT", "2"))
        self.health_generation = os.getenv(
            "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true"
        ).lower() not in ("0", "false", "no", "off")

    # ---- the event loop
    @contextmanager
    def on_loop(self) -> Iterator[None]:
        """Run the body as a coroutine step on the one event loop."""
        self.loop.acquire()
        self._on_loop.held = True
        try:
            yield
        finally:
            self._on_loop.held = False
            self.loop.release()

    @contextmanager
    def awaiting(self) -> Iterator[None]:
        """An `await` inside a coroutine: the loop serves the others meanwhile."""
        if not getattr(self._on_loop, "held", False):
            yield
            return
        self._on_loop.held = False
        self.loop.release()
        try:
            yield
        finally:
            self.loop.acquire()
            self._on_loop.held = True

    def tokenize_one_request(self, req: Msg) -> None:
        """`_tokenize_one_request` runs on the event loop. Fault `blocked_http_loop`: it makes a
        synchronous call that never returns (as a tokenizer or a blocking I/O call inside a
        coroutine would), so the loop never runs anything again: every endpoint stalls while the
        process lives."""
        if self.fault_active("blocked_http_loop"):
            logger.debug("fault blocked_http_loop: a blocking call on the event loop")
            while True:
                time.sleep(1.0)

    # ---- subprocesses
    def start_subprocesses(self) -> None:
        """Start scheduler(s) and detokenizer from the calling thread (PDEATHSIG follows that
        thread). With `--tp-size N`, N scheduler processes titled as SGLang 0.5.15.post1 titles
        them (`configure_scheduler_process`, scheduler.py:4247-4262: `sglang::scheduler` + `_TP<r>`
        when tp_size > 1), which rendezvous on a port of their own as the engine's TP group; only
        rank 0 exchanges requests and outputs with this process."""
        env = child_env()
        common = child_command()
        tp_size = max(int(self.ns.tp_size), 1)
        # several nodes: this node's ranks only (node rank 0 runs TP0 and the HTTP side), every
        # node's ranks meeting at --dist-init-addr
        init_method = dist_init_method(self.ns, _free_port()) if tp_size > 1 else None
        conns: list[Connection] = []
        # scheduler (TP rank 0) -> detokenizer -> this process, as the real engine's ZMQ path
        sched_detok, detok_sched = socket.socketpair()
        detok_parent, detok_child = socket.socketpair()
        for tp_rank in tp_rank_range(self.ns):
            parent, child = socket.socketpair()
            fd = child.fileno()
            extra: list[str] = []
            fds = [fd]
            if tp_rank == 0:
                extra = ["--detokenizer-fd", str(sched_detok.fileno())]
                fds.append(sched_detok.fileno())
            scheduler = subprocess.Popen(  # noqa: S603 - our own module, fixed argv
                [*common, "--title", scheduler_title(self.ns, tp_rank), "--fd", str(fd), *extra],
                pass_fds=tuple(fds),
                env=env,
                stdin=subprocess.DEVNULL,
            )
            child.close()
            self.children.append(scheduler)
            self.child_names.append("scheduler" if tp_size == 1 else f"scheduler_TP{tp_rank}")
            conns.append(Connection(parent.detach()))
            if tp_rank == 0:
                sched_detok.close()
                detokenizer = subprocess.Popen(  # noqa: S603
                    [
                        *common,
                        "--title",
                        "sglang::detokenizer",
                        "--role",
                        "detokenizer",
                        "--fd",
                        str(detok_child.fileno()),
                        "--detokenizer-fd",
                        str(detok_sched.fileno()),
                    ],
                    pass_fds=(detok_child.fileno(), detok_sched.fileno()),
                    env=env,
                    stdin=subprocess.DEVNULL,
                )
                detok_child.close()
                detok_sched.close()
                self.children.append(detokenizer)
                self.child_names.append("detokenizer")
        self.detok_conn = Connection(detok_parent.detach())
        self.conn = conns[0]
        self.tp_conns = conns  # ranks > 0 only read their config: kept open for their lives
        config = scheduler_config(self.ns, self.server_args, self.started_at, init_method)
        for tp_rank, conn in zip(tp_rank_range(self.ns), conns, strict=True):
            send_msg(
                conn,
                self._send_lock,
                {**config, "tp_rank": tp_rank, "title": scheduler_title(self.ns, tp_rank)},
            )
        send_msg(self.detok_conn, threading.Lock(), config)  # the detokenizer's fault settings
        threading.Thread(target=self._reader, name="tokenizer-handle-loop", daemon=True).start()
        threading.Thread(
            target=self._reader,
            args=(self.detok_conn,),
            name="tokenizer-handle-loop-detokenizer",
            daemon=True,
        ).start()

    def wait_ready(self) -> bool:
        """Block until the scheduler says it is ready (True) or a subprocess exits first (False),
        as 0.5.15.post1's `_wait_for_scheduler_ready` (entrypoints/engine.py:1368-1395: poll the
        rank's pipe, then check every scheduler for an early death). No time limit: a scheduler
        loading a model on a busy node may take minutes. Fault `tp_rank_killed_at_launch`: the
        engine runs an SGLang from before PR#20287, whose launcher blocks in `recv()` on rank 0's
        pipe (engine.py before the fix); a later rank's death is never seen."""
        if self.ns.fault == "tp_rank_killed_at_launch":
            return self._wait_for_scheduler_ready_before_pr20287()
        while not self._ready.wait(0.5):
            if any(proc.poll() is not None for proc in self.children):
                return self._ready.is_set()
        return True

    def _wait_for_scheduler_ready_before_pr20287(self) -> bool:
        """`scheduler_pipe_readers[i].recv()` for i in rank order (SGLang before PR#20287): rank 0
        first, with no look at the other ranks; only rank 0's own exit (its pipe's EOF) ends it."""
        scheduler = self.children[0]
        while not self._ready.wait(0.5):
            if scheduler.poll() is not None:
                return self._ready.is_set()
        return True

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

    def _reader(self, conn: Connection | None = None) -> None:
        """handle_loop (0.5.15.post1 tokenizer_manager.py:1848-1860) reads one PULL socket that the
        scheduler's control replies and the detokenizer's outputs both reach: here, two pipes."""
        conn = conn or self.conn
        assert conn is not None
        while True:
            try:
                msg = recv_msg(conn)
            except (EOFError, OSError, ValueError):
                return  # the subprocess watchdog reports the death
            if msg.get("type") == "snapshot":
                self.snapshot = msg  # shared memory, written by the scheduler: no loop involved
                continue
            if msg.get("type") == "metrics":
                self.scheduler_metrics = msg  # the Prometheus multiprocess files: the same
                continue
            with self.on_loop():  # handle_loop is a task on the event loop
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
                    # FanOutCommunicator.handle_recv (communicator.py:86-89): the answer goes to
                    # the call in flight, even one whose caller has given up.
                    slot = self._internal_result
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
        with self.awaiting():
            slot.event.wait()
        return slot.value

    # ---- generation
    def generate_request(
        self, req: Msg, cancel: threading.Event | None = None, log_metrics: bool = True
    ) -> Msg | None:
        """Pass the pause gate and the reader lock, run on the scheduler, wait for the output."""
        self.tokenize_one_request(req)
        with self.awaiting():
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
            if self.fault_active("killed_mid_generate"):
                self._die_now()
            while not self._wait(slot.event, 0.5):
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

    def _wait(self, event: threading.Event, timeout: float) -> bool:
        with self.awaiting():
            return event.wait(timeout)

    def _die_now(self) -> None:
        """Fault `killed_mid_generate`: SIGKILL this HTTP process as soon as the armed phase's
        first generation reached the scheduler (a demo rollout ends in a fraction of a second: a
        later kill could miss it), as the kernel's OOM killer does: no handler runs, nothing is
        logged, the listening socket closes (new connections are refused) and the requests in
        flight are cut. The scheduler and the detokenizer die with it through their parent-death
        signal, as SGLang's do (`kill_itself_when_parent_died`); the SGLangEngine actor that
        spawned it lives on."""
        os.kill(os.getpid(), signal.SIGKILL)

    def _pass_pause_gate(self, cancel: threading.Event | None) -> bool:
        """`async with self.is_pause_cond: await wait_for(lambda: not self.is_pause)`
        (tokenizer_manager.py:619-620): a new request waits here while paused, before it reaches
        the scheduler, so `/v1/loads` and the scheduler gauges never see it; only the HTTP
        middleware's `sglang:http_requests_active{endpoint="/generate"}` counts it."""
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
            with self.awaiting():
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
        """`/server_info`'s scheduler query under slime's patch: `asyncio.wait_for(...,
        SGLANG_SERVER_INFO_TIMEOUT)`, `internal_states = []` on timeout (docker/patch/latest/
        sglang.patch lines 333-344)."""
        states = self._queueing_call(time.monotonic() + self.server_info_timeout)
        if states is not None:
            return [s for s in states if isinstance(s, dict)]
        logger.warning(
            "Timed out getting internal state for /server_info after %.1fs; returning empty "
            "internal_states",
            self.server_info_timeout,
        )
        return []

    def _queueing_call(self, deadline: float) -> list[Any] | None:
        """0.5.15.post1 FanOutCommunicator.queueing_call (managers/communicator.py:38-58), with the
        patch's wait_for cancelling it at `deadline` (None). Kept as the real one behaves: a call
        cancelled while its answer is awaited leaves `_result_event` set, and one cancelled while
        queued leaves its ready event in the queue, so every later call waits behind it and times
        out too: one stall over 2 s poisons `/server_info` until the engine restarts (0.5.23 takes
        an asyncio.Lock instead and recovers)."""
        ready: threading.Event | None = None
        with self._lock:
            if self._internal_result is not None or self._internal_ready:
                ready = threading.Event()
                self._internal_ready.append(ready)
        if ready is not None and not self._wait(ready, max(deadline - time.monotonic(), 0.0)):
            return None  # cancelled in `await ready_event.wait()`: the event stays queued
        slot = Slot.new()
        with self._lock:
            self._internal_result = slot
        self.send({"type": "get_internal_state", "id": f"internal-{uuid.uuid4().hex}"})
        if not self._wait(slot.event, max(deadline - time.monotonic(), 0.0)):
            return None  # cancelled in `await self._result_event.wait()`: never cleared
        with self._lock:
            self._internal_result = None
            if self._internal_ready:
                self._internal_ready.popleft().set()
        value = slot.value or {}
        states = value.get("states") if isinstance(value, dict) else None
        return list(states) if isinstance(states, list) else []

    # ---- HTTP middleware metrics
    def http_request_started(self, endpoint: str, method: str) -> None:
        with self._lock:
            key = (endpoint, method)
            self.http_requests[key] = self.http_requests.get(key, 0.0) + 1
            self.http_active[key] = self.http_active.get(key, 0.0) + 1

    def http_request_ended(self, endpoint: str, method: str, status: int | None) -> None:
        """`status` None: no response was made (the middleware's `finally` still runs)."""
        with self._lock:
            key = (endpoint, method)
            self.http_active[key] = self.http_active.get(key, 0.0) - 1
            if status is not None:
                rkey = (endpoint, method, str(status))
                self.http_responses[rkey] = self.http_responses.get(rkey, 0.0) + 1

    def pause_generation(self, mode: str) -> None:
        if self.fault_active("pause_continue_shared_future"):
            self._worker_control(True)
            return
        self._pause_generation(mode)

    def _worker_control(self, pause: bool) -> None:
        """Fault `pause_continue_shared_future` (sgl-project/sglang#33696): a TokenizerWorker of
        `--tokenizer-worker-num N` (PR#24462) sends a pause or continue to the router and awaits
        ONE shared `_pause_continue_future`, resolved by the router's broadcast. A second call
        made before the first's broadcast replaces that future; the broadcasts then resolve the
        current one only, and the first caller's HTTP call never returns. Each broadcast still
        applies its pause state (in order: after a pause and a continue, not paused)."""
        slot = Slot.new()
        with self._lock:
            self._pause_continue_future = slot
        threading.Thread(
            target=self._router_broadcast, args=(pause,), name="router-broadcast", daemon=True
        ).start()
        with self.awaiting():
            slot.event.wait()

    def _router_broadcast(self, pause: bool) -> None:
        time.sleep(2.0)  # the router's round trip to every worker (slow: a loaded router)
        with self.is_pause_cond:
            self.is_pause = pause
            self.is_pause_cond.notify_all()
        with self._lock:
            current = self._pause_continue_future
        if current is not None and not current.event.is_set():
            current.put(None)

    def _pause_generation(self, mode: str) -> None:
        """tokenizer_manager.py:1696-1709: only the tokenizer's `is_pause` is set in mode `abort`
        (slime's, the default: io_struct.py:1483); `retract`/`in_place` also tell the scheduler.
        In mode `abort` the whole drain (abort all, then poll the update lock every second until
        no request holds it, :1697-1709) runs inside `async with self.is_pause_cond`: until the
        scheduler has finished every request, `/continue_generation`, another pause, a weight
        update made while paused and new `/generate` requests all wait for the condition's lock.
        A scheduler that never answers keeps the pause call, and all of them, waiting forever."""
        with self.awaiting():
            self.is_pause_cond.acquire()
        try:
            self.is_pause = True
            if mode != "abort":
                self.send({"type": "pause_generation", "mode": mode})
                return
            while self.model_update_lock.readers > 0 or self.fault_active("hang_pause_generation"):
                # fault hang_pause_generation: a drain that never ends (a request that holds the
                # update lock and never finishes its abort): the pause, and every call behind
                # the condition, wait for ever
                self.send({"type": "abort", "abort_all": True})
                with self.awaiting():
                    time.sleep(1.0)
        finally:
            self.is_pause_cond.release()

    def continue_generation(self) -> None:
        if self.fault_active("pause_continue_shared_future"):
            self._worker_control(False)
            return
        if self._late_pause:
            return  # fault stay_paused_after_update: this continue is lost
        with self.awaiting():
            self.is_pause_cond.acquire()
        try:
            self.is_pause = False
            self.is_pause_cond.notify_all()
        finally:
            self.is_pause_cond.release()
        self.send({"type": "continue_generation"})

    def weight_update(self, msg: Msg) -> Msg:
        """Paused: run while holding the pause lock; else take the writer side of the update lock."""
        if msg.get("abort_all_requests"):
            self.send({"type": "abort", "abort_all": True})
        with self.awaiting():
            self.is_pause_cond.acquire()
        try:
            if self.is_pause:
                return self._weight_update_roundtrip(msg)
        finally:
            self.is_pause_cond.release()
        with self.awaiting():
            self.model_update_lock.acquire_write()
        try:
            return self._weight_update_roundtrip(msg)
        finally:
            self.model_update_lock.release_write()

    def _weight_update_roundtrip(self, msg: Msg) -> Msg:
        result = dict(self.roundtrip(msg) or {})
        version = msg.get("weight_version")
        if result.get("success") and version is not None:
            self.weight_version = str(version)
            self.server_args["weight_version"] = str(version)
            result["message"] = f"{result.get('message', '')} Weight version updated to {version}."
        if result.get("success") and self.fault_active("stay_paused_after_update"):
            self._pause_after_update()
        return result

    def _pause_after_update(self) -> None:
        """Fault `stay_paused_after_update`: a second after the update (the caller's own pause /
        continue pair has ended by then) generation is paused again, and every later continue is
        lost: nothing resumes it."""
        if self._late_pause:
            return
        self._late_pause = True

        def pause_late() -> None:
            time.sleep(1.0)
            logger.debug("fault stay_paused_after_update: generation stays paused")
            with self.is_pause_cond:
                self.is_pause = True

        threading.Thread(target=pause_late, name="late-pause", daemon=True).start()

    def fault_active(self, name: str) -> bool:
        """The server fault `name` is selected, past its delay and armed (its arm file exists)."""
        if self.ns.fault != name or time.time() < self.started_at + max(self.ns.fault_after_s, 0):
            return False
        arm = self.ns.fault_arm_file
        return arm is None or os.path.exists(arm)

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


def scheduler_title(ns: Any, tp_rank: int) -> str:
    """The process title of TP rank `tp_rank`: `--scheduler-title` with one TP rank (the stand-in's
    default `sglang::scheduler_TP0`), else `sglang::scheduler_TP<r>` with that title's other
    suffixes kept (scheduler.py:4247-4262 builds ` DP<d>`, ` PP<p>`, ..., ` TP<r>` and replaces
    spaces by `_`)."""
    title = str(ns.scheduler_title)
    if int(ns.tp_size) <= 1:
        return title
    return f"{re.sub(r'_TP[0-9]+$', '', title)}_TP{tp_rank}"


def child_env() -> dict[str, str]:
    """The environment of the engine's children: this one, with the stand-in's root importable."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[len(__name__.split(".")) - 1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def child_command() -> list[str]:
    """The real interpreter path, not a title as argv[0] (with a title Python cannot find a
    virtualenv and starts the base prefix without its site-packages): a venv, uv or conda
    environment stays that environment. The child sets its title with setproctitle, as SGLang's
    run_scheduler_process does."""
    return [sys.executable, "-m", SCHEDULER_MODULE, "--parent-pid", str(os.getpid())]


def scheduler_config(ns: Any, server_args: Msg, started_at: float, init_method: str | None) -> Msg:
    """The config message each scheduler reads first (its TP rank and title are added per rank)."""
    return {
        "type": "config",
        "server_args": server_args,
        "fault": ns.fault,
        "fault_at": started_at + max(ns.fault_after_s, 0.0),
        "fault_arm_file": ns.fault_arm_file,
        "step_s": ns.step_s,
        "max_total_num_tokens": ns.max_total_tokens,
        "max_running_requests": ns.max_running_requests,
        "weight_sync_timeout_s": ns.weight_sync_timeout_s,
        "tp_size": max(int(ns.tp_size), 1),
        "dist_init_method": init_method,
    }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

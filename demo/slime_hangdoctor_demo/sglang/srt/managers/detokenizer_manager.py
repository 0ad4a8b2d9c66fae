"""The `sglang::detokenizer` child: the relay of the scheduler's generation outputs to the HTTP
process, as in SGLang 0.5.15.post1.

Real path (0.5.15.post1): the scheduler pushes `BatchTokenIDOutput` to the detokenizer
(`send_to_detokenizer`, scheduler.py:4152), whose `DetokenizerManager.event_loop`
(detokenizer_manager.py:161-169) receives it, decodes it (`handle_batch_token_id_out` ->
`_decode_batch_token_id_output`, :406-412) and pushes the `BatchStrOutput` to the tokenizer manager,
whose `handle_loop` (tokenizer_manager.py:1848-1860) stamps `last_receive_tstamp` on every message:
the "heartbeat" that `/health` waits for (http_server.py:631-652, "Server couldn't get a response
from detokenizer"). The ZMQ sockets have no high-water mark (utils/network.py:234-238): the
scheduler never blocks on a detokenizer that stops reading; ZMQ's I/O thread queues for it, as the
reader thread here does. Control replies go from the scheduler straight to the tokenizer
(`send_to_tokenizer`), not through here.

Fault `detokenizer_stalled` (sglang#36333, #40809): once armed, the next output batch stops the
detokenizer's loop inside `_decode_batch_token_id_output`; the process lives, nothing more reaches
the HTTP process, so `/generate` never returns and `/health` turns 503 after
SGLANG_HEALTH_CHECK_TIMEOUT. What stops the real one is not established in those threads (it
followed a disconnected client's zombie request, which 0.5.15.post1 does not leave: its
`generate_request` drops state only on `Exception`, tokenizer_manager.py:636-646, so the delayed
abort of :1808-1816 still finds the rid); the stand-in models the state, not the cause.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from multiprocessing.connection import Connection

from slime_hangdoctor_demo.sglang.srt.managers.io_struct import Msg, recv_msg, send_msg


def sock_recv(inbox: queue.Queue[Msg]) -> Msg:
    """io_struct.py:2295 `sock_recv`: the loop's receive (here from the I/O thread's queue)."""
    return inbox.get()


class DetokenizerManager:
    def __init__(
        self, recv_from_scheduler: Connection, send_to_tokenizer: Connection, cfg: Msg
    ) -> None:
        self.recv_from_scheduler = recv_from_scheduler
        self.send_to_tokenizer = send_to_tokenizer
        self.send_lock = threading.Lock()
        self.fault = str(cfg.get("fault") or "none")
        self.fault_at = float(cfg.get("fault_at") or 0.0)
        self.fault_arm_file = cfg.get("fault_arm_file") or None
        # ZMQ's I/O thread: receives while the loop is busy (no high-water mark)
        self.inbox: queue.Queue[Msg] = queue.Queue()
        threading.Thread(target=self._io_thread, name="zmq-io", daemon=True).start()

    def _io_thread(self) -> None:
        while True:
            try:
                self.inbox.put(recv_msg(self.recv_from_scheduler))
            except (EOFError, OSError, ValueError):
                os._exit(0)  # the scheduler is gone

    def fault_active(self) -> bool:
        if self.fault != "detokenizer_stalled" or time.time() < self.fault_at:
            return False
        return self.fault_arm_file is None or os.path.exists(self.fault_arm_file)

    def event_loop(self) -> None:
        """detokenizer_manager.py:161-169: receive, dispatch, send on."""
        while True:
            recv_obj = sock_recv(self.inbox)
            output = self.handle_batch_token_id_out(recv_obj)
            if output is not None and not send_msg(self.send_to_tokenizer, self.send_lock, output):
                os._exit(0)  # the HTTP process is gone

    def handle_batch_token_id_out(self, recv_obj: Msg) -> Msg:
        """detokenizer_manager.py:406-412: decode the batch, build the string output."""
        return self._decode_batch_token_id_output(recv_obj)

    def _decode_batch_token_id_output(self, recv_obj: Msg) -> Msg:
        if self.fault_active():
            while True:  # the stall: the loop never gets back to its receive
                time.sleep(1.0)
        return recv_obj


def run_detokenizer_process(
    recv_from_scheduler: Connection, send_to_tokenizer: Connection, parent_pid: int
) -> None:
    """detokenizer_manager.py:483-500. The stand-in's config comes first, from the HTTP process on
    the socket pair the outputs then go back on."""
    del parent_pid  # the parent-death watch runs in sglang_scheduler.main
    try:
        cfg = recv_msg(send_to_tokenizer)
    except (EOFError, OSError, ValueError):
        os._exit(1)
    DetokenizerManager(recv_from_scheduler, send_to_tokenizer, cfg).event_loop()

"""Messages between the HTTP process and the scheduler: JSON over a socket pair.

The real engine sends pickled request dataclasses over ZMQ; the stand-in sends JSON objects with a
`type` field through `multiprocessing.connection.Connection` (length-prefixed)."""

from __future__ import annotations

import json
import threading
from multiprocessing.connection import Connection
from typing import Any

Msg = dict[str, Any]

FAULTS = (
    "none",
    "never_healthy",
    "stuck_scheduler",
    "stuck_prefill",
    "skip_weight_sync",
    "stuck_before_weight_broadcast",
    "hang_update_weights_from_tensor",
    "hang_release_memory_occupation",
    "stay_paused_after_update",
    "killed_mid_generate",
    "blocked_http_loop",
    "prefetch_check_diverged",
    "detokenizer_stalled",
    "slow_weight_storage",
    "stuck_begin_weight_update",
    "tp_rank_killed_at_launch",
    "tp_rank_killed",
    "running_timeout_diverged",
    "tp_rank_stuck",
    # issue 45 item 5
    "hang_pause_generation",
    "pause_continue_shared_future",
)


def send_msg(conn: Connection, lock: threading.Lock, msg: Msg) -> bool:
    """Send one JSON message; False when the peer is gone."""
    data = json.dumps(msg, separators=(",", ":")).encode("utf-8")
    try:
        with lock:
            conn.send_bytes(data)
    except (OSError, EOFError, ValueError):
        return False
    return True


def recv_msg(conn: Connection) -> Msg:
    """Receive one JSON message (raises EOFError / OSError when the peer is gone)."""
    msg = json.loads(conn.recv_bytes().decode("utf-8"))
    if not isinstance(msg, dict):
        raise ValueError("message is not an object")
    return msg

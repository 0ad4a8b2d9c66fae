"""Process helpers and `init_custom_process_group` (as in `sglang/srt/utils/common.py`)."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time
from datetime import timedelta
from typing import Any

DEFAULT_PG_TIMEOUT_S = 1800.0  # torch default_pg_timeout, which SGLang's weight-update group uses


def kill_itself_when_parent_died(parent_pid: int) -> None:
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


def launch_dummy_health_check_server(host: str, port: int) -> None:
    """The HTTP server of a node of rank >= 1 (0.5.15.post1 utils/common.py:3006-3066): `/ping`,
    `/health` and `/health_generate` answer 200 at once, with no look at the schedulers; any other
    path 404 (FastAPI's `{"detail":"Not Found"}`); `/metrics` (slime always sets
    --enable-metrics, slime 624b824 sglang_engine.py:553) the Prometheus page of this process, which counts no
    request. Served from a daemon thread named `health-check-server`, as SGLang's."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            path = self.path.split("?", 1)[0]
            if path in ("/ping", "/health", "/health_generate"):
                self._reply(200, b"", "text/plain")
            elif path == "/metrics":
                self._reply(200, b"", "text/plain; version=0.0.4; charset=utf-8")
            else:
                self._reply(404, b'{"detail":"Not Found"}', "application/json")

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(min(length, 1 << 20))
            self._reply(404, b'{"detail":"Not Found"}', "application/json")

        def _reply(self, status: int, body: bytes, ctype: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    thread = threading.Thread(target=server.serve_forever, name="health-check-server", daemon=True)
    thread.start()
    logging.getLogger("sglang_standin.http").info(
        "Dummy health check server started in background thread at %s:%d", host, port
    )


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


def broadcast_pyobj(
    data: list[Any] | None,
    rank: int,
    dist_group: Any = None,
    src: int = 0,
    force_cpu_device: bool = True,
) -> list[Any]:
    """Broadcast a list of objects from `src` to the group's other ranks: a size, then the pickled
    bytes, each with a blocking `dist.broadcast` (SGLang 0.5.15.post1 `utils/common.py:2132-2178`).
    A rank that is not `src` waits inside the first `broadcast` until `src` sends, however long
    that takes: the TP ranks of an idle engine sit here between batches. The stand-in's messages
    are its own, between its own processes (as SGLang's)."""
    import pickle

    import torch
    import torch.distributed as dist

    if rank == src:
        if not data:
            dist.broadcast(torch.tensor([0], dtype=torch.long), src=src, group=dist_group)
            return []
        serialized = pickle.dumps(data)
        tensor_data = torch.frombuffer(bytearray(serialized), dtype=torch.uint8)
        tensor_size = torch.tensor([len(serialized)], dtype=torch.long)
        dist.broadcast(tensor_size, src=src, group=dist_group)
        dist.broadcast(tensor_data, src=src, group=dist_group)
        return data
    tensor_size = torch.tensor([0], dtype=torch.long)
    dist.broadcast(tensor_size, src=src, group=dist_group)
    size = int(tensor_size.item())
    if size == 0:
        return []
    tensor_data = torch.empty(size, dtype=torch.uint8)
    dist.broadcast(tensor_data, src=src, group=dist_group)
    received: list[Any] = pickle.loads(bytes(tensor_data.numpy()))  # noqa: S301 - our own ranks
    return received

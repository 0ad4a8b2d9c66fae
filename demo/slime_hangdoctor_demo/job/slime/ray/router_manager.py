"""`start_session_server`, as miles's (radixark/miles 31f1ca961,
miles/ray/rollout/router_manager.py:98-149): with `--use-session-server`, the RolloutManager's
constructor spawns the session server (slime has none; see slime/rollout/session/) after the
router, one process per port, and waits until it answers."""

from __future__ import annotations

import argparse
import copy
import logging
import multiprocessing
import multiprocessing.process
import random
import time
import urllib.request

from slime.utils.misc import get_free_port

logger = logging.getLogger(__name__)


def wait_for_server_ready(
    ip: str, port: int, process: multiprocessing.process.BaseProcess, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process.is_alive():
            raise RuntimeError(f"the session server on port {port} exited ({process.exitcode})")
        try:
            with urllib.request.urlopen(f"http://{ip}:{port}/health", timeout=1.0):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the session server on port {port} did not answer within {timeout}s")


def start_session_server(args: argparse.Namespace) -> None:
    """router_manager.py:98-149: one session server (spawn, not fork), proxying to the router."""
    from slime.rollout.session.server import run_session_server

    if not getattr(args, "use_session_server", False):
        return
    if args.session_server_ip is None:
        args.session_server_ip = args.sglang_router_ip
    port = args.session_server_port or get_free_port(random.randint(5000, 6000))
    router_url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}"
    child_args = copy.copy(args)
    child_args.session_server_port = port
    process = multiprocessing.get_context("spawn").Process(
        target=run_session_server, args=(child_args, router_url)
    )
    process.daemon = True
    process.start()
    args.session_server_ports = [port]
    # miles waits 30 s; a loaded demo box imports slowly
    wait_for_server_ready(args.session_server_ip, port, process, timeout=180)
    logger.info(
        f"Session servers launched at {args.session_server_ip}, ports {[port]} (1 instances)"
    )

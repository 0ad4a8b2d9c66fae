"""A node of a multi-node engine other than node rank 0 (as `sglang/srt/entrypoints/engine.py`).

SGLang 0.5.15.post1 runs one engine over several hosts with `--nnodes N --node-rank K
--dist-init-addr HOST:PORT` on each (slime starts one SGLangEngine actor per node of the engine,
`node_rank = rank % nnodes`, all with the same `dist_init_addr`: slime 624b824
sglang_engine.py:521-538, rollout.py:896-903). On node rank K >= 1 `launch_server` ->
`Engine._launch_subprocesses` (engine.py:763-862):

- starts this node's scheduler processes only, TP ranks `tp_size // nnodes * K` and up
  (`_calculate_rank_ranges`, engine.py:1400-1431), titled `sglang::scheduler_TP<r>` by their global
  rank; no detokenizer, no TokenizerManager, no HTTP API (engine.py:835-836: "non-zero rank nodes do
  not need to run tokenizer or detokenizer");
- waits for them to be ready (`wait_for_ready`, engine.py:838), then starts
  `launch_dummy_health_check_server(host, port, enable_metrics)` (engine.py:850-852; utils/common.py:
  3006-3066): a uvicorn app on a daemon thread named `health-check-server` that answers `/ping`,
  `/health` and `/health_generate` with 200 whatever the schedulers do (and `/metrics` with
  --enable-metrics), 404 for any other path;
- then blocks in `wait_for_completion` (engine.py:854, 711-717: `proc.join()` on each scheduler)
  for as long as they live. No SubprocessWatchdog on these nodes (it is started after the
  node-rank-0 branch, engine.py:893-900).

slime's node-rank-K actor does not wait for the health check (sglang_engine.py:55-56) and never
calls the engine over HTTP (`_make_request` returns at once when `node_rank != 0`).
"""

from __future__ import annotations

import argparse
import logging
import socket
import subprocess
import threading
import time
from multiprocessing.connection import Connection

from slime_hangdoctor_demo.sglang.srt.managers.io_struct import recv_msg, send_msg
from slime_hangdoctor_demo.sglang.srt.managers.tokenizer_manager import (
    child_command,
    child_env,
    scheduler_config,
    scheduler_title,
)
from slime_hangdoctor_demo.sglang.srt.server_args import (
    build_server_args,
    dist_init_method,
    tp_rank_range,
)
from slime_hangdoctor_demo.sglang.srt.utils.common import launch_dummy_health_check_server

logger = logging.getLogger("sglang_standin.http")


class Engine:
    """The part of SGLang's `Engine` that a node of rank >= 1 runs."""

    @classmethod
    def _launch_subprocesses(cls, ns: argparse.Namespace) -> None:
        """This node's schedulers, the dummy health server once they are ready, then a wait on
        the schedulers for as long as they live (engine.py:835-862)."""
        procs, conns = cls._launch_scheduler_processes(ns)

        def wait_for_ready() -> bool:
            # `_wait_for_scheduler_ready` (engine.py:1368-1397): each rank's "ready", or an early
            # death of any of them
            for conn in conns:
                while not conn.poll(0.5):
                    if any(p.poll() is not None for p in procs):
                        return False
                try:
                    if recv_msg(conn).get("status") != "ready":
                        return False
                except (EOFError, OSError, ValueError):
                    return False
            return True

        def wait_for_completion() -> None:
            for proc in procs:
                code = proc.wait()
                logger.error(
                    "Scheduler or DataParallelController %d terminated with %s", proc.pid, code
                )

        if not wait_for_ready():
            logger.error("A scheduler of node rank %d died while it loaded", ns.node_rank)
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
            raise SystemExit(1)
        launch_dummy_health_check_server(ns.host, ns.port)
        wait_for_completion()

    @classmethod
    def _launch_scheduler_processes(
        cls, ns: argparse.Namespace
    ) -> tuple[list[subprocess.Popen[bytes]], list[Connection]]:
        """One scheduler per TP rank of this node, each with its config on its own socket (the
        stand-in's `mp.Process` + pipe of `_launch_scheduler_processes`, engine.py:591-650)."""
        env = child_env()
        common = child_command()
        # a node of rank >= 1 meets the others at --dist-init-addr (launch_server checks it is set)
        config = scheduler_config(ns, build_server_args(ns), time.time(), dist_init_method(ns, 0))
        procs: list[subprocess.Popen[bytes]] = []
        conns: list[Connection] = []
        lock = threading.Lock()
        for tp_rank in tp_rank_range(ns):
            parent, child = socket.socketpair()
            title = scheduler_title(ns, tp_rank)
            proc = subprocess.Popen(  # noqa: S603 - our own module, fixed argv
                [*common, "--title", title, "--fd", str(child.fileno())],
                pass_fds=(child.fileno(),),
                env=env,
                stdin=subprocess.DEVNULL,
            )
            child.close()
            conn = Connection(parent.detach())
            send_msg(conn, lock, {**config, "tp_rank": tp_rank, "title": title})
            procs.append(proc)
            conns.append(conn)
        return procs, conns

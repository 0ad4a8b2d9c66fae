"""Command-line arguments of the stand-in engine and the ServerArgs dict `/server_info` shows
(as `sglang/srt/server_args.py`)."""

from __future__ import annotations

import argparse
from typing import Any

from slime_hangdoctor_demo.sglang.srt.managers.io_struct import FAULTS

Msg = dict[str, Any]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m slime_hangdoctor_demo.sglang_server",
        description="Stand-in for one SGLang 0.5.15 engine (HTTP + scheduler child).",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--api-key", default=None)
    p.add_argument("--admin-api-key", default=None)
    p.add_argument("--hicache-storage-backend-extra-config", default=None)
    p.add_argument("--model-loader-extra-config", default="{}")
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--fault-after-s", type=float, default=0.0)
    p.add_argument(
        "--fault-arm-file",
        default=None,
        help="demo only: the fault is live only once this file exists (armed at run time)",
    )
    p.add_argument("--request-log", default=None, help="append one JSON line per request")
    p.add_argument("--model-path", default="demo/model")
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--tp-size", type=int, default=1)
    # multi-node engines (SGLang's own flags): `--nnodes N --node-rank K --dist-init-addr HOST:PORT`
    # on every node of the engine; node rank 0 serves HTTP, the others only run their TP ranks
    # (entrypoints/engine.py `_launch_subprocesses`)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr", default=None)
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
        "load_snapshot_publish_interval": 15,
        "api_key": ns.api_key,
        "admin_api_key": ns.admin_api_key,
        "hicache_storage_backend_extra_config": ns.hicache_storage_backend_extra_config,
        "model_loader_extra_config": ns.model_loader_extra_config,
        "served_model_name": served,
        "weight_version": "default",
        "enable_memory_saver": bool(ns.enable_memory_saver),
        "disable_overlap_schedule": False,
        "dist_init_addr": ns.dist_init_addr,
        "nnodes": ns.nnodes,
        "node_rank": ns.node_rank,
        "crash_dump_folder": None,
    }


def tp_rank_range(ns: argparse.Namespace) -> range:
    """The TP ranks this node of the engine runs: 0.5.15.post1 entrypoints/engine.py:1400-1431
    `_calculate_rank_ranges` (pp_size 1): `tp_size // nnodes` consecutive ranks from
    `tp_size_per_node * node_rank`, so node rank 1 of a TP=4 engine on two nodes runs TP2 and TP3."""
    tp_size = max(int(ns.tp_size), 1)
    nnodes = max(int(ns.nnodes), 1)
    per_node = max(tp_size // nnodes, 1)
    start = per_node * (int(ns.node_rank) % nnodes)
    return range(start, start + per_node)


def dist_init_method(ns: argparse.Namespace, fallback_port: int) -> str:
    """The TP group's rendezvous: `tcp://<dist_init_addr>` where it is given (every node of a
    multi-node engine meets there: 0.5.15.post1 model_executor/model_runner.py:1275-1281), else
    a port of the engine's own on 127.0.0.1."""
    if ns.dist_init_addr:
        return f"tcp://{ns.dist_init_addr}"
    return f"tcp://127.0.0.1:{fallback_port}"

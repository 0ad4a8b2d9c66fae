"""Small helpers named as in slime/utils/misc.py, plus the demo's fault switch."""

from __future__ import annotations

import argparse
import socket
from dataclasses import dataclass
from typing import Any


@dataclass
class Box:
    """Wraps an ObjectRef so Ray does not resolve it when passed as an argument."""

    inner: Any


def should_run_periodic_action(rollout_id: int, interval: int | None) -> bool:
    return interval is not None and (rollout_id + 1) % interval == 0


def get_current_node_ip() -> str:
    return "127.0.0.1"  # the demo stays on loopback


def get_free_port(
    start_port: int = 10000, consecutive: int = 1, taken: set[int] | None = None
) -> int:
    port = start_port
    while True:
        span = range(port, port + consecutive)
        if all(p not in (taken or set()) and _is_port_free(p) for p in span):
            return port
        port += consecutive


def _is_port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def fault_armed(args: argparse.Namespace, name: str, rollout_id: int) -> bool:
    """Whether the demo fault `name` is selected and armed at this rollout id."""
    return bool(args.fault == name and rollout_id >= args.fault_after_steps)


def engine_takes_traffic(
    args: argparse.Namespace, engine_index: int, rollout_id: int, evaluation: bool
) -> bool:
    """Demo fault plan: the engine whose scheduler is set to get stuck at its next decode step
    receives generation traffic only from the armed step on (eval traffic only, for `eval_hang`),
    so that the job runs healthy until then."""
    if engine_index != args.fault_engine:
        return True
    if args.fault == "rollout_engine_stuck":
        return fault_armed(args, args.fault, rollout_id)
    if args.fault == "eval_hang":
        return evaluation and fault_armed(args, args.fault, rollout_id)
    return True

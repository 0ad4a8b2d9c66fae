"""Small helpers named as in slime/utils/misc.py, plus the demo's fault switch."""

from __future__ import annotations

import argparse
import os
import socket
import threading
import time
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


def die_with_parent_after_fork() -> None:
    """Demo hygiene: a multiprocessing child forked from this process after this call gets
    SIGKILL when the thread that forked it ends (Linux prctl PR_SET_PDEATHSIG), set in the child
    by multiprocessing's after-fork hook, before its target runs. A Ray actor killed with SIGKILL
    runs no atexit hook that would end its daemon children."""
    import multiprocessing.util

    multiprocessing.util.register_after_fork(_PDEATHSIG_KEY, _set_pdeathsig)


class _AfterForkKey:
    """A weak-referenceable key for multiprocessing's after-fork registry."""


_PDEATHSIG_KEY = _AfterForkKey()


def _set_pdeathsig(_key: object) -> None:
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the child may outlive a killed actor


def set_parent_death_signal() -> None:
    """Demo hygiene for a spawned child (no after-fork hook runs there): SIGKILL when the thread
    that started it ends."""
    _set_pdeathsig(None)


def fault_armed(args: argparse.Namespace, name: str, rollout_id: int) -> bool:
    """Whether the demo fault `name` is selected and armed at this rollout id."""
    return bool(args.fault == name and rollout_id >= args.fault_after_steps)


def fault_arms_at(args: argparse.Namespace, name: str, rollout_id: int) -> bool:
    """Whether the demo fault `name` is selected and this is the rollout that arms it (once: a
    fault its arm file holds, cleared by removing the file, is not armed again by the next
    rollout; benchmarks/bench_soak.py arms and clears it in turns)."""
    return bool(args.fault == name and rollout_id == args.fault_after_steps)


def start_black_hole_proxy() -> str:
    """Demo fault `rollout_behind_proxy` (slime#1026: "a proxy setting on the master node"): an
    HTTP proxy on this node that accepts every connection and never answers (a proxy that cannot
    reach the engines and has no timeout of its own). Returns its URL; a daemon thread holds the
    accepted connections open for the life of the process."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(128)
    held: list[socket.socket] = []

    def _hold() -> None:
        while True:
            conn, _addr = server.accept()
            held.append(conn)  # never read, never answered

    threading.Thread(target=_hold, name="black_hole_proxy", daemon=True).start()
    return f"http://127.0.0.1:{server.getsockname()[1]}"


def start_reward_service(args: argparse.Namespace) -> None:
    """Demo fault `reward_service_stuck`: the remote reward model that `--rm-url` names, started as
    a service outside the job (user_plugins/reward_service.py): detached from the job's process
    tree (a double fork: its parent exits at once), it answers the healthy rollouts' requests and
    wedges from the armed rollout on."""
    import subprocess
    import sys
    from urllib.parse import urlsplit

    port = urlsplit(args.rm_url).port
    answer = args.fault_after_steps * args.rollout_batch_size * args.n_samples_per_prompt
    service = [sys.executable, "-m", "user_plugins.reward_service"]
    service += ["--port", str(port), "--answer", str(answer)]
    detach = "import subprocess, sys; subprocess.Popen(sys.argv[1:], start_new_session=True)"
    subprocess.run([sys.executable, "-c", detach, *service], check=True, timeout=30)
    deadline = time.monotonic() + 30
    while not _port_taken(port):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the demo's reward service did not listen on port {port}")
        time.sleep(0.1)


def start_slow_storage(args: argparse.Namespace) -> None:
    """Demo fault `weight_load_slow_storage`: the slow shared storage engine 1's host reads the
    disk weight sync's checkpoints from (user_plugins/slow_storage.py), started as a daemon outside
    the job (a double fork, as the reward service): it mirrors `--update-weight-disk-dir` under the
    mount that host sees it at, serving each weight file at 512 KiB/s."""
    import subprocess
    import sys

    from slime_hangdoctor_demo.sglang.srt.model_loader.weight_utils import slow_host_mount

    source = os.path.abspath(args.update_weight_disk_dir)
    mount = os.path.dirname(slow_host_mount(os.path.join(source, "weight_v000000")))
    os.makedirs(source, exist_ok=True)
    storage = [sys.executable, "-m", "user_plugins.slow_storage", "--source", source]
    storage += ["--mount", mount, "--rate", str(512 << 10)]
    detach = "import subprocess, sys; subprocess.Popen(sys.argv[1:], start_new_session=True)"
    subprocess.run([sys.executable, "-c", detach, *storage], check=True, timeout=30)
    deadline = time.monotonic() + 30
    while not os.path.isdir(mount):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the demo's slow storage did not mount {mount}")
        time.sleep(0.1)


def _port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def master_node_proxy_env(proxy_url: str) -> dict[str, str]:
    """The proxy variables a shell on the master node exports: both spellings, and a no_proxy that
    names localhost but not the address the engines are reached at (127.0.0.1 here, a node IP on
    a cluster), so Python's rule (and httpx's) sends the engines' requests to the proxy."""
    return {
        "http_proxy": proxy_url,
        "HTTP_PROXY": proxy_url,
        "no_proxy": "localhost",
        "NO_PROXY": "localhost",
    }


def load_function(path: str) -> Any:
    """`module.path.function` -> the function (slime's load_function, for --*-path hooks)."""
    import importlib

    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)

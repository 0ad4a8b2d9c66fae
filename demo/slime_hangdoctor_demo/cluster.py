"""A private, throw-away Ray cluster on this machine (for `slime-hangdoctor demo` and the tests).

`start_head` runs ``ray start --head`` on 127.0.0.1 with free ports and its own short temp dir, so
several heads (parallel tests, a user's own cluster) can live side by side. `RayHead.stop` ends the
processes of *this* head only (found by its temp dir and GCS port, plus all their descendants):
``ray stop`` would kill every Ray cluster on the machine. Jobs go through the Job API over HTTP.

Stand-alone: stdlib, plus psutil in `stop`; nothing of the doctor (slime_hangdoctor).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NODE_IP = "127.0.0.1"
START_TIMEOUT_S = 90.0
HTTP_TIMEOUT_S = 5.0
TERMINAL_JOB_STATES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


class ClusterError(RuntimeError):
    """The demo cluster could not be started or used; the message says why."""


@dataclass
class RayNodeProc:
    """One `ray start` node of ours: its temp dir names every process it started."""

    temp_dir: Path
    node_ip: str = NODE_IP  # the head's: the IP Ray chose (it replaces 127.0.0.1 by a routable one)
    owner_dir: Path | None = None  # the mkdtemp dir holding temp_dir; removed on stop
    # extra ways to recognise our processes: a command line holding all strings of one tuple
    match: tuple[tuple[str, ...], ...] = ()
    log: Path | None = None
    stopped: bool = field(default=False, init=False)

    def pids(self) -> set[int]:
        """Every live process of this node (daemons, workers, drivers and their children)."""
        return _processes_of(((str(self.temp_dir),), *self.match))

    def stop(self, timeout: float = 2.0) -> None:
        """SIGTERM this node's processes, SIGKILL what is left after `timeout`, remove temp dirs.

        (gcs_server and raylet often ignore SIGTERM for many seconds: a throw-away cluster needs
        no graceful shutdown.)"""
        if self.stopped:
            return
        _terminate(self.pids(), timeout)
        _terminate(self.pids(), 2.0)  # anything raylet spawned while dying
        self.stopped = True
        if self.owner_dir is not None:
            shutil.rmtree(self.owner_dir, ignore_errors=True)


@dataclass
class RayHead(RayNodeProc):
    """A running head node: where to reach it, and how to stop it."""

    gcs_address: str = ""
    dashboard_url: str = ""
    workers: list[RayNodeProc] = field(default_factory=list)

    def stop(self, timeout: float = 2.0) -> None:
        for worker in self.workers:
            worker.stop(timeout)
        super().stop(timeout)

    def __enter__(self) -> RayHead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- starting nodes


def start_head(
    workdir: Path,
    *,
    num_cpus: int = 2,
    env: Mapping[str, str] | None = None,
    timeout: float = START_TIMEOUT_S,
    object_store_mib: int | None = None,
    num_gpus: int = 0,
    same_address_as: RayHead | None = None,
) -> RayHead:
    """Start a head with its dashboard on 127.0.0.1 and wait until ``/api/version`` answers.
    `num_gpus`: the GPUs the head declares (Ray trusts the number: a recording of code that asks
    for GPUs, such as SGLang's Ray-mode scheduler actors, runs on a machine without any).

    `workdir` receives the `ray start` log; the Ray temp dir is a short dir under /tmp (AF_UNIX
    socket paths must stay under ~107 bytes), named ``<tmp>/ray`` so that ``RAY_TMPDIR=<tmp>``
    makes Ray's own "auto" discovery find this head. `same_address_as`: a stopped head whose GCS
    and dashboard ports this one takes (a head restarted under a watchdog that keeps its address).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    owner = Path(tempfile.mkdtemp(prefix="hd-", dir="/tmp"))
    temp_dir = owner / "ray"
    gcs_port, dash_port, client_port, agent_port, monitor_port, metric_port = free_ports(6)
    if same_address_as is not None:
        gcs_port = int(same_address_as.gcs_address.rsplit(":", 1)[1])
        dash_port = int(same_address_as.dashboard_url.rsplit(":", 1)[1])
    gcs = f"{NODE_IP}:{gcs_port}"
    head = RayHead(
        temp_dir=temp_dir,
        owner_dir=owner,
        # the Ray Client server is the one head process whose command line lacks the temp dir
        match=(("ray.util.client.server", f":{gcs_port} "),),
        log=workdir / "ray-head.log",
        gcs_address=gcs,
        dashboard_url=f"http://{NODE_IP}:{dash_port}",
    )
    args = [
        "--head",
        f"--node-ip-address={NODE_IP}",
        f"--port={gcs_port}",
        "--include-dashboard=true",
        f"--dashboard-host={NODE_IP}",
        f"--dashboard-port={dash_port}",
        f"--ray-client-server-port={client_port}",
        f"--dashboard-agent-listen-port={agent_port}",
        f"--num-cpus={num_cpus}",
        f"--num-gpus={num_gpus}",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
    ]
    if object_store_mib is not None:
        args.append(f"--object-store-memory={object_store_mib * 1024 * 1024}")
    # Ray binds these two metrics ports at fixed defaults (44217, 44227): a second head would clash.
    full_env = {
        "AUTOSCALER_METRIC_PORT": str(monitor_port),
        "DASHBOARD_METRIC_PORT": str(metric_port),
        **(env or {}),
    }
    try:
        _ray_start(args, head.log, full_env, timeout)
        deadline = time.monotonic() + timeout
        _wait_http(f"{head.dashboard_url}/api/version", deadline)
        _wait_for(lambda: bool(list_nodes(head)), deadline, "the head node to register")
        head.node_ip = str(list_nodes(head)[0].get("node_ip") or NODE_IP)
    except BaseException:
        head.stop(timeout=3.0)
        raise
    return head


def start_worker_node(
    head: RayHead,
    workdir: Path,
    *,
    resources: Mapping[str, float],
    num_cpus: int = 1,
    env: Mapping[str, str] | None = None,
    timeout: float = START_TIMEOUT_S,
    node_ip_address: str | None = None,
) -> RayNodeProc:
    """Join a second node (same machine, own temp dir and custom `resources`) to `head`.

    `node_ip_address` (e.g. 127.0.0.2, a loopback alias) gives it an IP of its own, so that the two
    nodes of one machine are told apart by IP as on a real cluster.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    owner = Path(tempfile.mkdtemp(prefix="hdw-", dir="/tmp"))
    temp_dir = owner / "ray"
    (agent_port,) = free_ports(1)
    node = RayNodeProc(temp_dir=temp_dir, owner_dir=owner, log=workdir / f"ray-{owner.name}.log")
    args = [
        f"--address={head.gcs_address}",
        f"--node-ip-address={node_ip_address or NODE_IP}",
        f"--dashboard-agent-listen-port={agent_port}",
        f"--num-cpus={num_cpus}",
        "--num-gpus=0",
        f"--resources={json.dumps(dict(resources))}",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
    ]
    try:
        before = {n.get("node_id") for n in list_nodes(head)}
        _ray_start(args, node.log, env, timeout)
        _wait_for(
            lambda: any(
                n.get("node_id") not in before and n.get("state") == "ALIVE"
                for n in list_nodes(head)
            ),
            time.monotonic() + timeout,
            "the new node to register with the head",
        )
    except BaseException:
        node.stop(timeout=3.0)
        raise
    head.workers.append(node)
    return node


def free_ports(n: int) -> list[int]:
    """`n` distinct TCP ports that were free a moment ago on 127.0.0.1."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((NODE_IP, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# Ray's worker processes listen on 10002-19999 (`ray start --min/max-worker-port` defaults) and the
# kernel hands out outgoing connections' local ports from ip_local_port_range (32768-60999 by
# default): a port counted up from either can be taken between the check and the server's bind.
_QUIET_PORTS_LOW = 20000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def quiet_port_block(size: int = 64) -> int:
    """The first of `size` consecutive ports, free now on 127.0.0.1, that lie between Ray's worker
    ports and the kernel's ephemeral range, at a random place so two demos on one box rarely meet
    (slime counts its engines' ports up from such a base and checks each one itself)."""
    import random

    try:
        ephemeral_low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    high = ephemeral_low - size
    if high <= _QUIET_PORTS_LOW:  # an unusual ephemeral range: fall back to one the OS hands out
        return free_ports(1)[0]
    rng = random.SystemRandom()
    for _ in range(32):
        base = rng.randrange(_QUIET_PORTS_LOW, high)
        if all(_port_free(port) for port in range(base, base + size)):
            return base
    return free_ports(1)[0]


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((NODE_IP, port))
        except OSError:
            return False
    return True


def ray_cli() -> list[str]:
    """The `ray` command of this Python (the script beside it, else `python -m`)."""
    beside = Path(sys.executable).parent / "ray"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    found = shutil.which("ray")
    return [found] if found else [sys.executable, "-m", "ray.scripts.scripts"]


def _ray_start(
    args: list[str], log: Path | None, env: Mapping[str, str] | None, timeout: float
) -> None:
    # RAY_AUTH_MODE=disabled: Ray 2.60 turns token auth on for `ray start` whenever
    # ~/.ray/auth_token exists, and any earlier local `ray.init()` on the machine writes that file;
    # the demo's private heads are throw-away and answer without a token (a caller may override).
    full_env = {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
        # a stopped demo job's hung driver gets 1 s after SIGTERM, not Ray's 3 s, before SIGKILL
        "RAY_JOB_STOP_WAIT_TIME_S": "1",
        **(env or {}),
    }
    argv = [*ray_cli(), "start", *args]
    out = log.open("ab") if log is not None else subprocess.DEVNULL
    try:
        rc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
            timeout=timeout,
            check=False,
        ).returncode
    except subprocess.TimeoutExpired:
        raise ClusterError(
            f"`ray start` did not return within {timeout:.0f}s (log: {log})"
        ) from None
    finally:
        if log is not None and not isinstance(out, int):
            out.close()
    if rc != 0:
        raise ClusterError(
            f"`ray start` failed with exit code {rc}: {_last_message(_tail(log, 40))} (log: {log})"
        )


def _last_message(tail: str) -> str:
    """The last line of a log tail that is not part of a traceback's frames (Ray ends a failed
    start with `Exception: The current node timed out during startup...`)."""
    lines = [line.strip() for line in tail.splitlines() if line.strip() and not line[0].isspace()]
    return lines[-1] if lines else "(its log is empty)"


def _tail(log: Path | None, lines: int = 15) -> str:
    if log is None:
        return ""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# --------------------------------------------------------------------------- stopping


def _processes_of(markers: Iterable[tuple[str, ...]]) -> set[int]:
    """Pids whose command line holds all strings of one of `markers`, with all their descendants."""
    import psutil

    markers = tuple(m for m in markers if m and all(m))
    children: dict[int, list[int]] = {}
    roots: set[int] = set()
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "ppid", "cmdline"]):
        pid = proc.info["pid"]
        ppid = proc.info["ppid"]
        if ppid is not None:
            children.setdefault(ppid, []).append(pid)
        cmd = " ".join(proc.info["cmdline"] or ()) + " "
        if pid != me and any(all(part in cmd for part in m) for m in markers):
            roots.add(pid)
    found = set(roots)
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found and child != me:
                found.add(child)
                todo.append(child)
    return found


def _terminate(pids: set[int], timeout: float) -> None:
    import psutil

    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    for proc in procs:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=3.0)


# --------------------------------------------------------------------------- HTTP (Job API)


def http_json(
    method: str,
    url: str,
    body: Any = None,
    *,
    data: bytes | None = None,
    timeout: float = HTTP_TIMEOUT_S,
) -> tuple[int, Any]:
    """(status, parsed JSON or text) of one request; status 0 when there was no answer."""
    payload = (
        data if data is not None else (json.dumps(body).encode() if body is not None else None)
    )
    req = urllib.request.Request(url, data=payload, method=method)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - our own URL
            return resp.status, _decode(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, _decode(exc.read())
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


def _decode(raw: bytes) -> Any:
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def _wait_http(url: str, deadline: float) -> None:
    _wait_for(lambda: http_json("GET", url, timeout=1.0)[0] == 200, deadline, f"{url} to answer")


def _wait_for(check: Any, deadline: float, what: str, interval: float = 0.25) -> None:
    while True:
        if check():
            return
        if time.monotonic() >= deadline:
            raise ClusterError(f"timed out waiting for {what}")
        time.sleep(interval)


def list_nodes(head: RayHead) -> list[dict[str, Any]]:
    status, doc = http_json("GET", f"{head.dashboard_url}/api/v0/nodes?limit=1000")
    if status != 200 or not isinstance(doc, dict):
        return []
    rows = doc.get("data", {}).get("result", {}).get("result", [])
    return [r for r in rows if isinstance(r, dict)]


def upload_working_dir(head: RayHead, directory: Path) -> str:
    """Zip `directory` and PUT it to the dashboard's package store; returns its gcs:// URI."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(directory.rglob("*")):
            rel = path.relative_to(directory)
            if path.is_file() and "__pycache__" not in rel.parts:
                zf.write(path, rel.as_posix())
    data = buf.getvalue()
    name = f"_ray_pkg_{hashlib.sha1(data).hexdigest()[:16]}.zip"  # noqa: S324 - a name, not security
    status, answer = http_json(
        "PUT", f"{head.dashboard_url}/api/packages/gcs/{name}", data=data, timeout=30.0
    )
    if status != 200:
        raise ClusterError(f"uploading {directory} failed: HTTP {status} {str(answer)[:300]}")
    return f"gcs://{name}"


def submit_job(
    head: RayHead,
    entrypoint: str,
    *,
    working_dir: Path | None,
    submission_id: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> str:
    """Submit `entrypoint` through the Job API (``POST /api/jobs/``); returns the submission id."""
    runtime_env: dict[str, Any] = {}
    if working_dir is not None:
        runtime_env["working_dir"] = upload_working_dir(head, working_dir)
    if env:
        runtime_env["env_vars"] = dict(env)
    body = {"entrypoint": entrypoint, "submission_id": submission_id, "runtime_env": runtime_env}
    deadline = time.monotonic() + timeout
    while True:  # the job agent may still be starting: 5xx until it is there
        status, answer = http_json("POST", f"{head.dashboard_url}/api/jobs/", body, timeout=timeout)
        if status == 200 and isinstance(answer, dict):
            return str(answer.get("submission_id") or submission_id)
        if status < 500 or time.monotonic() >= deadline:
            raise ClusterError(f"job submission failed: HTTP {status} {str(answer)[:500]}")
        time.sleep(0.5)


def job_info(head: RayHead, submission_id: str) -> dict[str, Any]:
    status, answer = http_json("GET", f"{head.dashboard_url}/api/jobs/{submission_id}")
    if status != 200 or not isinstance(answer, dict):
        raise ClusterError(f"job {submission_id}: HTTP {status} {str(answer)[:300]}")
    return answer


def job_logs(head: RayHead, submission_id: str) -> str:
    status, answer = http_json("GET", f"{head.dashboard_url}/api/jobs/{submission_id}/logs")
    return str(answer.get("logs", "")) if status == 200 and isinstance(answer, dict) else ""


def stop_job(head: RayHead, submission_id: str) -> bool:
    status, answer = http_json("POST", f"{head.dashboard_url}/api/jobs/{submission_id}/stop")
    return status == 200 and isinstance(answer, dict) and bool(answer.get("stopped"))


def wait_for_job_status(
    head: RayHead,
    submission_id: str,
    statuses: Iterable[str] = ("RUNNING",),
    *,
    timeout: float = 60.0,
) -> str:
    """Poll until the job is in one of `statuses`; raises ClusterError on timeout or when it ends
    in another terminal state (with the tail of its logs)."""
    wanted = set(statuses)
    deadline = time.monotonic() + timeout
    while True:
        status = str(job_info(head, submission_id).get("status"))
        if status in wanted:
            return status
        if status in TERMINAL_JOB_STATES:
            logs = job_logs(head, submission_id)[-2000:]
            raise ClusterError(f"job {submission_id} ended {status}, not {sorted(wanted)}:\n{logs}")
        if time.monotonic() >= deadline:
            raise ClusterError(f"job {submission_id} still {status} after {timeout:.0f}s")
        time.sleep(0.25)

"""Start and stop the SGLang stand-in (slime_hangdoctor_demo.sglang_server) for integration tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[2]


def keep_generating(url: str, stop: threading.Event) -> None:
    """POST short `/generate` requests to the engine at `url`, one after the other, until `stop`
    is set or a request fails (the stand-in was stopped): a generating engine for a test."""
    body = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 40}}
    while not stop.is_set():
        try:
            requests.post(url + "/generate", json=body, timeout=30)
        except requests.RequestException:
            return


def pythonpath() -> str:
    """The repository first, then the caller's own PYTHONPATH (a worktree's `demo/` wins over an
    editable install of another checkout)."""
    rest = os.environ.get("PYTHONPATH")
    return str(ROOT) + (os.pathsep + rest if rest else "")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Standin:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    request_log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, timeout: float = 10.0, **kw: Any) -> requests.Response:
        return requests.get(self.url + path, timeout=timeout, **kw)

    def post(self, path: str, timeout: float = 10.0, **kw: Any) -> requests.Response:
        return requests.post(self.url + path, timeout=timeout, **kw)

    def logged(self) -> list[dict[str, Any]]:
        if not self.request_log.exists():
            return []
        return [json.loads(line) for line in self.request_log.read_text().splitlines() if line]

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def children(self) -> list[Any]:
        import psutil

        try:
            return list(psutil.Process(self.proc.pid).children())
        except psutil.NoSuchProcess:
            return []

    def scheduler_pid(self) -> int:
        for child in self.children():
            if " ".join(child.cmdline()).startswith("sglang::scheduler"):
                return int(child.pid)
        raise AssertionError(f"no sglang::scheduler child of {self.proc.pid}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the session we created for it
        except (ProcessLookupError, PermissionError):
            pass


SNAPSHOT_WAIT_S = 5.0


def _wait_first_snapshot(standin: Standin) -> None:
    deadline = time.monotonic() + SNAPSHOT_WAIT_S
    while time.monotonic() < deadline:
        try:
            answer = requests.get(standin.url + "/v1/loads", timeout=1.0)
            if answer.status_code != 200 or answer.json().get("loads"):
                return  # published, or not ours to read (an API key): nothing to wait for
        except (requests.RequestException, ValueError, AttributeError):
            pass
        time.sleep(0.05)


def start_standin(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 30.0
) -> Standin:
    """Start a stand-in on a free loopback port and wait until its HTTP side answers, then (up to
    SNAPSHOT_WAIT_S) until its scheduler has published its first load snapshot: before that,
    `/v1/loads` answers `{"loads": []}` as SGLang 0.5.15 does, and tests start from a steady engine
    (a fault that stops the scheduler early never publishes one: it is not waited for longer)."""
    last = ""
    for _ in range(3):
        port = free_port()
        log_path = tmp_path / f"standin-{port}.log"
        request_log = tmp_path / f"requests-{port}.jsonl"
        cmd = [
            sys.executable,
            "-m",
            "slime_hangdoctor_demo.sglang_server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--request-log",
            str(request_log),
            "--step-s",
            "0.01",
            *args,
        ]
        full_env = {**os.environ, "PYTHONPATH": pythonpath(), **(env or {})}
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env, start_new_session=True
            )
        standin = Standin(proc, port, log_path, request_log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                requests.get(standin.url + "/v1/models", timeout=1.0)
                _wait_first_snapshot(standin)
                request_log.unlink(missing_ok=True)  # tests see only their own requests
                return standin
            except requests.RequestException:
                time.sleep(0.1)
        last = standin.output()
        standin.stop()
    raise AssertionError(f"the stand-in did not start:\n{last[-2000:]}")


def running_requests(s: Standin) -> int | None:
    """`num_running_reqs` of /v1/loads; None while it answers `{"loads": []}` (no snapshot yet)."""
    loads = s.get("/v1/loads").json()["loads"]
    return int(loads[0]["num_running_reqs"]) if loads else None


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
    """True as soon as `predicate` holds (a loaded 2-core CI box took over 10 s for a first batch
    of a stand-in whose scheduler imports torch's gloo)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def post_in_background(s: Standin, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST `body` to `path` on a thread; the box gets `response` or `error` when it ends."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["response"] = requests.post(s.url + path, json=body, timeout=60)
        except requests.RequestException as exc:
            box["error"] = exc

    box["thread"] = threading.Thread(target=run, daemon=True)
    box["thread"].start()
    return box

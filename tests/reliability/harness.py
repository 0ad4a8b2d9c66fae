"""Shared pieces of the reliability suite: run the real CLI in a subprocess, and fake peers on
real 127.0.0.1 sockets (raw TCP servers for misbehaving HTTP, a replaying Ray dashboard, a fake
NCCL RAS port). Fakes live at process boundaries only; nothing of ours is mocked."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
STANDINS = Path(__file__).resolve().parent / "standins"
REAL_RAY = ROOT / "tests" / "fixtures" / "real" / "gpu-2xh200-ray-nccl-hang"

# Every fault case runs with a short window and a whole-run deadline (--timeout) shorter than
# two probe timeouts (2.5 s each by default), so a peer that never answers meets the deadline.
TIMEOUT_S = 3.0
# The promise: done within --timeout + 1 s, interpreter start included. On a developer
# box loaded by other work the scheduler alone can add seconds: HANGDOCTOR_TIME_SLACK_S adds
# slack there. CI runs with none.
SLACK_S = float(os.environ.get("HANGDOCTOR_TIME_SLACK_S", "0"))
BOUND_S = TIMEOUT_S + 1.0 + SLACK_S


@dataclass(frozen=True)
class CliRun:
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str
    wall_s: float

    def verdict(self) -> dict[str, Any]:
        try:
            doc = json.loads(self.stdout)
        except json.JSONDecodeError as exc:
            raise AssertionError(
                f"stdout is not a JSON verdict ({exc}):\n{self.describe()}"
            ) from exc
        assert isinstance(doc, dict), self.describe()
        return doc

    @property
    def err(self) -> str:
        """stderr with its line wrapping undone (messages are wrapped to the terminal width)."""
        return " ".join(self.stderr.split())

    def blind_spots(self) -> list[str]:
        return [str(b) for b in self.verdict().get("blind_spots") or []]

    def describe(self) -> str:
        return (
            f"argv: {' '.join(self.argv)}\nrc={self.rc} wall={self.wall_s:.2f}s\n"
            f"--- stdout\n{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-4000:]}"
        )


def cli_env(
    *, path_first: Path | None = None, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment of a CLI run: this repo importable, no ambient Ray address or token."""
    env = dict(os.environ)
    for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_TOKEN", "SGLANG_API_KEY"):
        env.pop(var, None)
    env["RAY_AUTH_TOKEN_PATH"] = "/nonexistent/hangdoctor-reliability-token"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("SLIME_HANGDOCTOR_DEBUG", None)
    if path_first is not None:
        env["PATH"] = f"{path_first}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra or {})
    return env


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    hard_limit_s: float = 60.0,
    cwd: Path | None = None,
    python: str | None = None,
    umask: int | None = None,
) -> CliRun:
    """`python -m slime_hangdoctor ARGS` in a subprocess; wall time from spawn to exit.

    `hard_limit_s` only keeps a broken build from hanging the suite: the time bound is asserted
    by the caller (`assert_clean`)."""
    argv = (python or sys.executable, "-m", "slime_hangdoctor", *args)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env or cli_env(),
        cwd=str(cwd or ROOT),
        start_new_session=True,
        umask=-1 if umask is None else umask,
    )
    try:
        out, err = proc.communicate(timeout=hard_limit_s)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        out, err = proc.communicate(timeout=10)
        raise AssertionError(
            f"the CLI was still running after {hard_limit_s}s: {' '.join(argv)}\n"
            f"{err.decode(errors='replace')[-3000:]}"
        ) from None
    wall = time.monotonic() - t0
    kill_group(proc.pid)  # whatever it left behind in its session (stand-ins)
    return CliRun(
        tuple(argv),
        proc.returncode,
        out.decode(errors="replace"),
        err.decode(errors="replace"),
        wall,
    )


def kill_group(pgid: int) -> None:
    import signal

    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def assert_clean(
    run: CliRun, *, bound_s: float = BOUND_S, rcs: Sequence[int] = (0, 1, 2, 3)
) -> None:
    """No traceback, a known exit code, and done within the bound (`bound_s` includes SLACK_S)."""
    assert "Traceback" not in run.stderr and "Traceback" not in run.stdout, run.describe()
    assert "internal error" not in run.stderr, run.describe()
    assert run.rc in rcs, run.describe()
    assert run.wall_s <= bound_s, f"took {run.wall_s:.2f}s > {bound_s:.1f}s\n{run.describe()}"


def find_blind(run: CliRun, *needles: str) -> str:
    """The blind spot that contains every needle (case-sensitive); fails listing them all."""
    spots = run.blind_spots()
    for spot in spots:
        if all(n in spot for n in needles):
            return spot
    raise AssertionError(f"no blind spot with {needles!r} among:\n" + "\n".join(spots))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- raw TCP peers

Behaviour = Callable[[socket.socket, "RawServer"], None]


@dataclass
class RawServer:
    """A TCP server on 127.0.0.1 that runs `behaviour(conn)` for every connection in a thread.

    Connections are closed when the behaviour returns or when the server stops (so a behaviour
    that waits on `stopping` ends with the test)."""

    behaviour: Behaviour
    sock: socket.socket = field(init=False)
    port: int = field(init=False)
    stopping: threading.Event = field(default_factory=threading.Event)
    conns: list[socket.socket] = field(default_factory=list)
    requests: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            with self.lock:
                self.conns.append(conn)
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            self.behaviour(conn, self)
        except OSError:
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def read_request(self, conn: socket.socket, timeout: float = 5.0) -> bytes:
        """The request head (up to the blank line); recorded in `requests`."""
        conn.settimeout(timeout)
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        with self.lock:
            self.requests.append(data)
        return data

    def stop(self) -> None:
        self.stopping.set()
        self.sock.close()
        with self.lock:
            for c in self.conns:
                try:
                    c.close()
                except OSError:
                    pass
        self._thread.join(timeout=2)


@contextmanager
def raw_server(behaviour: Behaviour) -> Iterator[RawServer]:
    server = RawServer(behaviour)
    try:
        yield server
    finally:
        server.stop()


def http_head(status: int, ctype: str, length: int | None, reason: str = "OK") -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {ctype}", "Connection: close"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def answer_with(status: int, body: bytes, ctype: str = "application/json") -> Behaviour:
    """Every request gets this status and body."""

    def behaviour(conn: socket.socket, server: RawServer) -> None:
        server.read_request(conn)
        conn.sendall(http_head(status, ctype, len(body)) + body)

    return behaviour


def never_answer(conn: socket.socket, server: RawServer) -> None:
    """Accept, read the request, say nothing until the server stops."""
    server.read_request(conn)
    server.stopping.wait(120)


def byte_by_byte(delay_s: float = 0.2) -> Behaviour:
    """A valid answer, one byte every `delay_s`: each recv() succeeds, the whole never ends."""
    body = b'{"model_path": "demo/model", "is_generation": true}' * 50

    def behaviour(conn: socket.socket, server: RawServer) -> None:
        server.read_request(conn)
        for byte in http_head(200, "application/json", len(body)) + body:
            if server.stopping.wait(delay_s):
                return
            conn.sendall(bytes([byte]))

    return behaviour


def huge_body(total: int = 100 * 2**20) -> Behaviour:
    """A 200 answer announcing `total` bytes of JSON-looking filler, streamed until the peer goes."""
    chunk = b"[" + b"1," * 32767 + b"1]"

    def behaviour(conn: socket.socket, server: RawServer) -> None:
        server.read_request(conn)
        conn.sendall(http_head(200, "application/json", total))
        sent = 0
        while sent < total and not server.stopping.is_set():
            piece = chunk[: total - sent]
            conn.sendall(piece)
            sent += len(piece)

    return behaviour


def truncated_body(body: bytes, keep: int) -> Behaviour:
    """Announces len(body) bytes, sends `keep` of them, closes."""

    def behaviour(conn: socket.socket, server: RawServer) -> None:
        server.read_request(conn)
        conn.sendall(http_head(200, "application/json", len(body)) + body[:keep])

    return behaviour


# --------------------------------------------------------------------------- HTTP stubs


class _Routes(BaseHTTPRequestHandler):
    """path -> (status, body, content type, delay s); unknown paths 404. Records every request."""

    routes: ClassVar[dict[str, tuple[int, bytes, str, float]]] = {}
    default: ClassVar[tuple[int, bytes, str, float] | None] = None
    seen: ClassVar[list[tuple[str, str, dict[str, str]]]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        path = urlsplit(self.path).path
        type(self).seen.append((self.command, self.path, dict(self.headers.items())))
        status, body, ctype, delay = (
            self.routes.get(path)
            or self.default
            or (
                404,
                b"404: Not Found",
                "text/plain",
                0.0,
            )
        )
        if delay:
            time.sleep(delay)
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass

    do_GET = _answer
    do_POST = _answer


@dataclass
class HttpStub:
    server: ThreadingHTTPServer
    handler: type[_Routes]
    thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def seen(self) -> list[tuple[str, str, dict[str, str]]]:
        return self.handler.seen


@contextmanager
def http_stub(
    routes: dict[str, tuple[int, bytes, str, float]],
    default: tuple[int, bytes, str, float] | None = None,
    *,
    port: int = 0,
) -> Iterator[HttpStub]:
    """A recording HTTP server on 127.0.0.1 (`port`: a given one, e.g. a fallback's; 0: free)."""
    handler = type("Routes", (_Routes,), {"routes": routes, "default": default, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield HttpStub(server, handler, thread)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def dashboard_routes(
    capture: str = "hang", *, delay: float = 0.0, status: int | None = None
) -> dict[str, tuple[int, bytes, str, float]]:
    """The real Ray 2.60 dashboard answers of the 2x H200 capture, by path (query dropped).

    `status` replaces every answer but /api/version with that status (body kept); `delay`
    delays every answer but /api/version."""
    answers = json.loads((REAL_RAY / capture / "dashboard.json").read_text(encoding="utf-8"))
    routes: dict[str, tuple[int, bytes, str, float]] = {}
    for url, ans in answers.items():
        path = urlsplit(url).path
        body = (
            ans["body"].encode()
            if isinstance(ans["body"], str)
            else json.dumps(ans["body"]).encode()
        )
        if path == "/api/version":
            routes[path] = (int(ans["status"]), body, "application/json", 0.0)
        else:
            routes[path] = (status or int(ans["status"]), body, "application/json", delay)
    return routes


# --------------------------------------------------------------------------- a stand-in train rank

RANK_TITLE = "ray::MegatronTrainRayActor.train"


@dataclass
class Rank:
    """A stand-in train rank (standins/rank.py) titled `ray::MegatronTrainRayActor.train`."""

    proc: subprocess.Popen[bytes]
    ready: Path
    _reaper: threading.Thread

    @property
    def pid(self) -> int:
        return self.proc.pid

    def state(self) -> str | None:
        """One-letter state from /proc (None once gone)."""
        try:
            raw = Path(f"/proc/{self.pid}/stat").read_bytes()
        except OSError:
            return None
        return raw[raw.rfind(b")") + 2 : raw.rfind(b")") + 3].decode()

    def pokes(self) -> bytes:
        path = Path(str(self.ready) + ".pokes")
        return path.read_bytes() if path.exists() else b""

    def stop(self) -> None:
        import signal

        if self.proc.poll() is None:
            try:
                os.kill(self.pid, signal.SIGCONT)  # a stopped process must die too
                self.proc.kill()
            except ProcessLookupError:
                pass
        self._reaper.join(timeout=10)


def start_rank(
    workdir: Path, *args: str, env: dict[str, str] | None = None, name: str = "rank"
) -> Rank:
    """Start a stand-in rank and wait until it is set up. A thread reaps it as soon as it dies
    (so a killed rank is gone from /proc, not a zombie of the test)."""
    ready = workdir / f"{name}.ready"
    # SPT_NOENV=1 as the raylet starts Ray workers: the title stays within the command line and
    # /proc/<pid>/environ stays readable (setproctitle would otherwise write over it).
    full_env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "SPT_NOENV": "1", **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, str(STANDINS / "rank.py"), "--title", RANK_TITLE, str(ready), *args],
        env=full_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    reaper = threading.Thread(target=proc.wait, daemon=True)
    reaper.start()
    rank = Rank(proc, ready, reaper)
    deadline = time.monotonic() + 20
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            rank.stop()
            raise AssertionError(f"stand-in rank did not start (rc={proc.poll()})")
        time.sleep(0.05)
    return rank


@contextmanager
def rank_running(workdir: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Rank]:
    rank = start_rank(workdir, *args, env=env)
    try:
        yield rank
    finally:
        rank.stop()


def real_pyspy() -> str | None:
    """The real py-spy binary (not a pyenv shim): the one beside this Python, else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    import shutil

    return shutil.which("py-spy")


def pyspy_env(mode: str, target: int | None = None, **extra: str) -> dict[str, str]:
    """CLI environment whose `py-spy` is the stand-in in `mode` (see standins/pyspy_standin.py)."""
    env = {
        "HD_PYSPY_MODE": mode,
        "HD_STANDIN_PYTHON": sys.executable,
        "HD_STANDIN_TARGET": str(target or 0),
        "HD_REAL_PYSPY": real_pyspy() or "/nonexistent/py-spy",
        **extra,
    }
    return cli_env(path_first=STANDINS / "pyspy", extra=env)


# --------------------------------------------------------------------------- verdicts and bundles

COMMON = ("-f", "json", "--window", "0.3", "--timeout", str(TIMEOUT_S))


def texts(doc: Any) -> Iterator[str]:
    """Every string in a JSON document (the verdict: summary, findings, evidence, blind spots)."""
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for v in doc.values():
            yield from texts(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from texts(v)


def verdict_says(run: CliRun, *needles: str) -> str:
    """The first string of the verdict that contains every needle; fails showing the verdict."""
    doc = run.verdict()
    for text in texts(doc):
        if all(n in text for n in needles):
            return text
    raise AssertionError(
        f"no text of the verdict contains {needles!r}:\n{json.dumps(doc, indent=1)[:6000]}"
    )


def manifest(bundle: Path) -> dict[str, Any]:
    doc = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def probes(bundle: Path, source: str, target_part: str = "") -> list[dict[str, Any]]:
    return [
        p
        for p in manifest(bundle)["probes"]
        if p["source"] == source and target_part in str(p["target"])
    ]


def assert_other_evidence(bundle: Path) -> None:
    """The sources a fault does not touch are all there: the process scans of both samples (ok),
    and the NVML and NCCL RAS probes of this node (whatever their outcome on this machine)."""
    scans = probes(bundle, "processes", "processes")
    assert sorted(p["sample"] for p in scans if p["outcome"] == "ok") == [0, 1], scans
    assert probes(bundle, "nvml"), "no NVML probe record"
    assert sorted(p["sample"] for p in probes(bundle, "nccl_ras")) == [0, 1]


def end_standins(piddir: Path) -> None:
    """SIGKILL every stand-in py-spy that recorded its pid in `piddir` and may still run."""
    import signal

    for f in piddir.iterdir() if piddir.exists() else ():
        if f.name.isdigit():
            try:
                cmd = Path(f"/proc/{f.name}/cmdline").read_bytes()
            except OSError:
                continue
            if b"pyspy_standin" in cmd:  # the pid is still ours, not a recycled one
                try:
                    os.kill(int(f.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass


def wait_state(rank: Rank, ok: Callable[[str | None], bool], within_s: float) -> str | None:
    """Poll the rank's state until `ok(state)` or `within_s` passes; the last state seen."""
    end = time.monotonic() + within_s
    state = rank.state()
    while not ok(state) and time.monotonic() < end:
        time.sleep(0.02)
        state = rank.state()
    return state


def stopped(state: str | None) -> bool:
    return state in ("T", "t")


# --------------------------------------------------------------------------- NCCL RAS peers


def ras_speaker(text_body: bytes, json_body: bytes) -> Behaviour:
    """NCCL's RAS client protocol (CLIENT PROTOCOL / TIMEOUT / SET FORMAT / VERBOSE STATUS), as
    collect/nccl_ras.py documents it, answering the report with the given bodies."""

    def behaviour(conn: socket.socket, server: RawServer) -> None:
        conn.settimeout(5.0)
        buf = b""
        fmt_json = False
        while True:
            while b"\n" not in buf:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                buf += chunk
            line, _, buf = buf.partition(b"\n")
            cmd = line.decode(errors="replace").strip()
            with server.lock:
                server.requests.append(line)
            if cmd.startswith("CLIENT PROTOCOL"):
                conn.sendall(b"SERVER PROTOCOL 2\n")
            elif cmd.startswith("TIMEOUT") or cmd == "SET FORMAT json":
                fmt_json = fmt_json or cmd == "SET FORMAT json"
                conn.sendall(b"OK\n")
            elif cmd == "VERBOSE STATUS":
                conn.sendall(json_body if fmt_json else text_body)
                return

    return behaviour


def real_ras_bodies(capture: str = "hang") -> tuple[bytes, bytes]:
    """(text, JSON) report bodies a real NCCL 2.28.9 sent (tests/fixtures/real/...ray-nccl-hang)."""
    raw = (REAL_RAY / capture / "ras.json").read_text(encoding="utf-8")
    doc = json.loads(raw[: raw.rindex("}") + 1])
    return doc["text"]["body"].encode(), doc["json"]["body"].encode()


def engine_states(run: CliRun) -> dict[str, str]:
    """url -> state ("dead", "unresponsive", "stuck", ...) of every engine the verdict read."""
    extra = run.verdict().get("extra") or {}
    return {str(e["url"]): str(e["state"]) for e in extra.get("engines") or []}


def foreign_slime_processes(mine: set[int]) -> list[str]:
    """Titles of slime-looking processes (ray::/sglang::) on this machine that are not the test's:
    `--local` discovery would see them too (a developer box running other jobs; never in CI)."""
    import psutil

    out = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info.get("cmdline") or []
        title = cmd[0] if cmd else ""
        if proc.info["pid"] in mine or not title.startswith(("ray::", "sglang::")):
            continue
        if title.startswith(("ray::DashboardAgent", "ray::RuntimeEnvAgent", "ray::IDLE")):
            continue
        out.append(f"{proc.info['pid']} {title}")
    return out


def require_alone(*mine: int) -> None:
    """Skip a test whose verdict-level assertion needs this machine to run no other slime job."""
    import pytest

    others = foreign_slime_processes(set(mine))
    if others:
        pytest.skip(f"other slime processes run on this machine: {others[:3]}")

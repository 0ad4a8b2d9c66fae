"""A peer that accepts and then dawdles, wherever it dawdles, costs the doctor at most its deadline
(issue 32, point 2): `attach --timeout T` and `check --timeout T` exit within T + 1 s with a
verdict, and a `check` stuck so never keeps its lock past its run.

The peer is a Ray dashboard on a real 127.0.0.1 socket that answers with the recorded Ray 2.60
answers (`harness.dashboard_routes`), byte for byte, but drips one byte every DRIP_S seconds in one
place of the answers it is told to: the status line, the headers (after a prompt status line), or
the body (after prompt headers); on every path, or only on the state endpoints (so that the
address check passes and the dashboard pool's threads are the ones that wait). And a listener
that never accepts, its backlog full, so that connecting itself dawdles (the kernel drops the
SYNs). Before the fix, the socket timeout was per read and the deadline checked in the body loop
only: a dashboard that dripped its headers kept `attach --timeout 5` alive for 45 s; one that
dripped on the state endpoints got its verdict printed at the deadline, but the pool's workers
(not daemon threads, joined at exit) kept the process alive; a `check` stuck so held the lock.

Cases DP1-DP5 of docs/reliability.md."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.reliability.harness import (
    BOUND_S,
    COMMON,
    TIMEOUT_S,
    RawServer,
    assert_clean,
    dashboard_routes,
    find_blind,
    raw_server,
    run_cli,
)

pytestmark = pytest.mark.timeout(180)

DRIP_S = 0.5  # a byte every half second: each read succeeds, the answer never ends in time
PHASES = ("status", "headers", "body")
STATE_PATHS = ("/api/v0/actors", "/api/v0/tasks", "/api/jobs/", "/nodes")


def _answer_bytes(status: int, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    return head + body


def dripping_dashboard(phase: str, paths: tuple[str, ...] | None):
    """The recorded dashboard; on `paths` (None: every path) the answer drips from `phase` on."""
    routes = dashboard_routes()

    def behaviour(conn: socket.socket, server: RawServer) -> None:
        request = server.read_request(conn)
        line = request.split(b"\r\n", 1)[0].decode(errors="replace")
        path = line.split(" ")[1].split("?", 1)[0] if line.count(" ") >= 2 else "/"
        status, body, _, _ = routes.get(path, (404, b"not found", "", 0.0))
        data = _answer_bytes(status, body)
        if paths is not None and not path.startswith(paths):
            conn.sendall(data)
            return
        prompt = {
            "status": 0,
            "headers": data.index(b"\r\n") + 2,
            "body": data.index(b"\r\n\r\n") + 4,
        }[phase]
        conn.sendall(data[:prompt])
        for byte in data[prompt:]:
            if server.stopping.wait(DRIP_S):
                return
            conn.sendall(bytes([byte]))

    return behaviour


@contextmanager
def never_accepting() -> Iterator[str]:
    """A listener whose backlog is full and that never accepts: a connect to it dawdles (Linux
    drops the SYN of a connection its full queue cannot hold; the client retransmits)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers: list[socket.socket] = []
    try:
        for _ in range(4):  # fill the queue (a backlog of 0 still holds one or two)
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            fillers.append(s)
            time.sleep(0.05)
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        probe.settimeout(0.5)
        try:
            probe.connect(("127.0.0.1", port))
            dawdles = False
        except TimeoutError:
            dawdles = True
        finally:
            probe.close()
        if not dawdles:
            pytest.skip("this kernel completes connections past a full listen queue")
        yield f"http://127.0.0.1:{port}"
    finally:
        for s in fillers:
            s.close()
        listener.close()


@pytest.mark.parametrize("phase", PHASES)
def test_attach_against_a_dashboard_that_drips_everywhere(phase: str) -> None:
    """DP1: every answer, /api/version included, drips from `phase` on: `attach --timeout T` gives
    its verdict (unknown: no dashboard answered in time) within T + 1 s."""
    with raw_server(dripping_dashboard(phase, None)) as dash:
        run = run_cli("attach", dash.url, *COMMON)
    assert_clean(run, rcs=(3,))
    find_blind(run, "no Ray dashboard answered", "timed out")


@pytest.mark.parametrize("phase", PHASES)
def test_attach_against_a_dashboard_that_drips_on_the_state_endpoints(phase: str) -> None:
    """DP2: the address check passes, the state endpoints drip: the verdict comes within T + 1 s
    and the process ends with it (the dashboard pool's threads never hold it at exit); each
    dripping endpoint is a blind spot that says it timed out."""
    with raw_server(dripping_dashboard(phase, STATE_PATHS)) as dash:
        run = run_cli("attach", dash.url, *COMMON)
    assert_clean(run, rcs=(0, 1, 2, 3))
    verdict = run.verdict()
    assert verdict.get("status"), run.describe()
    spots = " ".join(run.blind_spots())
    assert "actors" in spots and ("timed out" in spots or "no answer" in spots), run.describe()


def test_attach_against_a_dashboard_that_never_accepts() -> None:
    """DP3: connecting dawdles (a full listen queue): the verdict within T + 1 s."""
    with never_accepting() as url:
        run = run_cli("attach", url, *COMMON)
    assert_clean(run, rcs=(3,))
    find_blind(run, "no Ray dashboard answered", "timed out")


def test_attach_over_https_against_a_peer_that_drips_its_handshake() -> None:
    """DP4: an https dashboard address whose peer accepts and drips bytes that never finish a TLS
    handshake: the handshake shares the run's deadline."""

    def behaviour(conn: socket.socket, server: RawServer) -> None:
        conn.settimeout(5.0)
        try:
            conn.recv(4096)  # the ClientHello
        except OSError:
            return
        for byte in b"\x16\x03\x03\x40\x00" + b"\x02" * 16000:  # a ServerHello that never ends
            if server.stopping.wait(DRIP_S):
                return
            conn.sendall(bytes([byte]))

    with raw_server(behaviour) as peer:
        run = run_cli("attach", peer.url.replace("http://", "https://"), *COMMON)
    assert_clean(run, rcs=(3,))
    find_blind(run, "no Ray dashboard answered")


@pytest.mark.parametrize("phase", ("headers", "body"))
def test_check_against_a_dripping_dashboard_ends_and_frees_its_lock(
    phase: str, tmp_path: Path
) -> None:
    """DP5: `check` (cron) against a dashboard dripping on its state endpoints ends within T + 1
    s, so its lock ends with it: the next check runs (not "another check is still running")."""
    state = tmp_path / "state" / "state.json"
    args = ("--state-file", str(state), "--window", "0.3", "--timeout", str(TIMEOUT_S), "--json")
    with raw_server(dripping_dashboard(phase, STATE_PATHS)) as dash:
        first = run_cli("check", dash.url, *args)
        second = run_cli("check", dash.url, *args)
    for run in (first, second):
        assert_clean(run, bound_s=BOUND_S)
        assert "another check is still running" not in run.stdout + run.stderr, run.describe()
        assert "lock held" not in run.stdout, run.describe()
        assert run.verdict().get("status"), run.describe()

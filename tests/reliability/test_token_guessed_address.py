"""Issue 32 point 7: the Ray token goes only to an address that came from the user or a trusted file.

With a token and no address, the doctor falls back to `http://127.0.0.1:8265`; on a node without a
dashboard any local user can listen there. A guessed address (that fallback, port 8265 of a GCS's
host, the Ray Client's host) is asked without the token. Each test puts a real recording HTTP
listener on the fallback port (8265 itself when free, else the same code path with the fallback
port moved to a free one), answering as Ray 2.60's dashboard does (the recorded 2x H200 capture),
and asserts that it never saw the token, and that the doctor still finds what it can.

A GCS on this machine is first matched with its Ray dashboard process (its command line names its
GCS and its port): only a process of a trusted user (root, the caller, `--uid`) counts, so another
user's process that claims to be the dashboard is never sent the token."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from slime_hangdoctor.collect import address
from slime_hangdoctor.collect.address import resolve_cluster
from slime_hangdoctor.errors import RayUnreachable
from tests.reliability.harness import (
    HttpStub,
    assert_clean,
    cli_env,
    dashboard_routes,
    http_stub,
    run_cli,
)
from tests.reliability.test_security_paths import NOBODY, fake_gcs

pytestmark = pytest.mark.timeout(120)

TOKEN = "SECRET-guessed-address-token-7a1f"
UNAUTHORIZED = (401, b"Unauthorized: Missing authentication token", "text/plain", 0.0)


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the listener binds
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def fallback_port(monkeypatch: pytest.MonkeyPatch) -> int:
    """The fallback dashboard port: Ray's default 8265 when nothing holds it on this machine,
    else a free one set as the resolver's default (the same code path)."""
    for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    if _port_free(address.DEFAULT_DASHBOARD_PORT):
        return address.DEFAULT_DASHBOARD_PORT
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    monkeypatch.setattr(address, "DEFAULT_DASHBOARD_PORT", port)
    return port


@contextmanager
def listener(port: int, *, wants_token: bool = False) -> Iterator[HttpStub]:
    routes = dashboard_routes()
    if wants_token:
        routes = dict.fromkeys(routes, UNAUTHORIZED)
    with http_stub(routes, port=port) as stub:
        yield stub


def _saw_token(stub: HttpStub) -> bool:
    return any(TOKEN in value for _, _, headers in stub.seen for value in headers.values())


def test_no_address_fallback_is_not_sent_the_token(fallback_port: int, tmp_path: Path) -> None:
    """The fallback answers as a dashboard without auth: it is used, without the token; the
    same listener given as the address is sent it (so this listener would have seen it)."""
    with listener(fallback_port) as stub:
        cluster = resolve_cluster(None, timeout=4, token=TOKEN, ray_temp_dir=tmp_path)
        assert stub.seen, "the fallback was not asked at all"
        assert not _saw_token(stub), stub.seen
        assert cluster.dashboard_url == f"http://127.0.0.1:{fallback_port}"
        assert cluster.token_ok is False
        given = resolve_cluster(stub.url, timeout=4, token=TOKEN, ray_temp_dir=tmp_path)
        assert _saw_token(stub) and given.token_ok


def test_a_fallback_that_wants_the_token_is_named_not_sent_it(
    fallback_port: int, tmp_path: Path
) -> None:
    with listener(fallback_port, wants_token=True) as stub:
        with pytest.raises(RayUnreachable) as err:
            resolve_cluster(None, timeout=4, token=TOKEN, ray_temp_dir=tmp_path)
        assert stub.seen and not _saw_token(stub), stub.seen
    assert "guessed" in str(err.value) and "URL" in err.value.help_text, err.value


def test_port_8265_of_a_dead_gcs_is_not_sent_the_token(fallback_port: int, tmp_path: Path) -> None:
    """`127.0.0.1:<dead port>` (a GCS form): the fallbacks are that port as HTTP (the user's own
    address: it may have the token) and port 8265 of the host (a guess: it may not)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    with listener(fallback_port) as stub:
        cluster = resolve_cluster(
            f"127.0.0.1:{dead}", timeout=4, token=TOKEN, ray_temp_dir=tmp_path
        )
        assert not _saw_token(stub), stub.seen
    assert cluster.dashboard_url.endswith(f":{fallback_port}") and not cluster.token_ok


def test_attach_with_no_address_never_sends_the_token_to_the_fallback(tmp_path: Path) -> None:
    """The whole CLI run (`attach` with RAY_AUTH_TOKEN and no address, the Ray temp dir empty):
    the listener on 127.0.0.1:8265 answers every state read of the run, and none carries the
    token; the run ends with a verdict."""
    if not _port_free(address.DEFAULT_DASHBOARD_PORT):
        pytest.skip("port 8265 is held on this machine: the CLI's fallback cannot be listened on")
    with listener(address.DEFAULT_DASHBOARD_PORT) as stub:
        env = cli_env(extra={"RAY_TMPDIR": str(tmp_path), "RAY_AUTH_TOKEN": TOKEN})
        run = run_cli("attach", "--window", "0.2", "--timeout", "8", "-f", "json", env=env)
        assert_clean(run, bound_s=30.0)
        assert len(stub.seen) > 1 and not _saw_token(stub), run.describe()
    assert run.verdict()["status"], run.describe()
    assert TOKEN not in run.stdout + run.stderr


@contextmanager
def dashboard_process(port: int, gcs_port: int, *, uid: int | None) -> Iterator[int]:
    """A process whose command line is a Ray dashboard's (ray/_private/services.py
    start_api_server: `python .../ray/dashboard/dashboard.py --host=... --port=... --gcs-address=
    ...`), run as `uid` (None: ours): what the resolver reads in /proc."""
    argv = [  # (a shell that sleeps: any user may run it; its arguments stay in /proc)
        "/bin/sh",
        "-c",
        "sleep 120; exit 0",  # (two commands: the shell stays, it does not exec sleep)
        "/opt/site-packages/ray/dashboard/dashboard.py",
        "--host=127.0.0.1",
        f"--port={port}",
        "--port-retries=0",
        f"--gcs-address=127.0.0.1:{gcs_port}",
    ]
    proc = subprocess.Popen(argv, user=uid, cwd="/")
    try:
        deadline = time.monotonic() + 10
        while b"--gcs-address" not in _cmdline(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


@pytest.mark.parametrize("owner", ["another-user", "ours"])
def test_a_dashboard_process_counts_only_as_a_trusted_users(
    owner: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`127.0.0.1:<gcs>` given with a token; a process on this machine claims to be that GCS's
    dashboard at port A; the GCS's KV names port B. Another user's process is not trusted: A never
    sees the token, and the KV's dashboard (B) is used. Our own user's process is (the control:
    A is sent the token and answers first)."""
    if owner == "another-user" and os.geteuid() != 0:
        pytest.skip("needs root to run a process as another user")
    for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    routes = dashboard_routes()
    with http_stub(routes) as claimed, http_stub(routes) as stored, fake_gcs("") as gcs:
        gcs.dashboard = stored.url.removeprefix("http://")
        port_a = claimed.server.server_address[1]
        with dashboard_process(port_a, gcs.port, uid=NOBODY if owner != "ours" else None):
            cluster = resolve_cluster(
                f"127.0.0.1:{gcs.port}", timeout=6, token=TOKEN, ray_temp_dir=tmp_path
            )
        if owner == "ours":
            assert cluster.dashboard_url == claimed.url and _saw_token(claimed)
            assert "dashboard process" in " ".join(cluster.tried)
        else:
            assert not _saw_token(claimed), claimed.seen
            assert cluster.dashboard_url == stored.url and _saw_token(stored)

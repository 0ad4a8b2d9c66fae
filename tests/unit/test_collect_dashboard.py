"""Dashboard client, capture_state, worker_traceback and address resolution against a stand-in
dashboard on 127.0.0.1 that replays the real 2x H200 answers (and Ray 2.60's real error texts)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import pytest

from slime_hangdoctor.bundle import BundleWriter
from slime_hangdoctor.collect.address import resolve_cluster
from slime_hangdoctor.collect.dashboard import (
    PROFILING_HELP,
    DashboardClient,
    capture_state,
    scrub_env_values,
    worker_traceback,
)
from slime_hangdoctor.collect.options import resolve_token
from slime_hangdoctor.errors import RayUnreachable
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.ray_state import parse_actors, parse_jobs

RAY = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "gpu-2xh200-ray-nccl-hang"
TOKEN = "s3cret-token-0123456789"
# Ray 2.60's texts: reporter_head (profiling disabled) and http_token_authentication (token).
PROFILING_403 = (
    "Profiling is disabled by default for security reasons. To enable profiling, set the "
    "environment variable RAY_DASHBOARD_ENABLE_PROFILING=1 on the Ray head node."
)
MISSING_TOKEN_401 = "Unauthorized: Missing authentication token"
BAD_TOKEN_403 = "Forbidden: Invalid authentication token"


def _replay() -> dict[str, tuple[int, str]]:
    """path (without query) -> (status, body) of the real hang capture."""
    answers = json.loads((RAY / "hang" / "dashboard.json").read_text(encoding="utf-8"))
    return {urlsplit(k).path: (v["status"], v["body"]) for k, v in answers.items()}


class _Dashboard(BaseHTTPRequestHandler):
    answers: ClassVar[dict[str, tuple[int, str]]] = {}
    token: ClassVar[str | None] = None
    seen_auth: ClassVar[list[str]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: str | bytes, ctype: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        auth = self.headers.get("Authorization", "")
        type(self).seen_auth.append(auth)
        if self.token is not None:
            if not auth:
                return self._send(401, MISSING_TOKEN_401, "text/plain")
            if auth != f"Bearer {self.token}":
                return self._send(403, BAD_TOKEN_403, "text/plain")
        if path == "/slow":
            time.sleep(3.0)
            return self._send(200, "{}")
        if path == "/stall":  # headers and a little of the body, then nothing
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.write(b"0123456789")
            self.wfile.flush()
            time.sleep(3.0)
            return None
        if path == "/big":
            return self._send(200, b"x" * 200_000, "text/plain")
        if path == "/worker/traceback":
            return self._send(403, PROFILING_403, "text/plain; charset=utf-8")
        if path in self.answers:
            status, body = self.answers[path]
            return self._send(status, body)
        return self._send(404, "404: Not Found", "text/plain")


@pytest.fixture
def dashboard() -> Iterator[tuple[str, type[_Dashboard]]]:
    handler = type("Handler", (_Dashboard,), {"answers": _replay(), "token": None, "seen_auth": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def no_ambient_token(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "no-token-here"))
    for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def writer(tmp_path: Path) -> BundleWriter:
    return BundleWriter(tmp_path / "bundle", command="test")


# --------------------------------------------------------------------------- capture_state


def test_capture_state_stores_bodies_verbatim(
    dashboard: tuple[str, type[_Dashboard]], writer: BundleWriter, no_ambient_token: None
) -> None:
    url, _ = dashboard
    records = {r.target: r for r in capture_state(writer, DashboardClient(url), sample=1)}
    replay = _replay()
    for target, path in [("actors", "/api/v0/actors"), ("jobs", "/api/jobs/")]:
        rec = records[target]
        assert rec.outcome is Outcome.OK and rec.sample == 1
        assert rec.meta["endpoint"] == path and rec.meta["status"] == 200
        assert rec.artifact is not None
        # verbatim but for the values of runtime-env env_vars (secrets: blanked before storing)
        stored = (writer.root / rec.artifact).read_bytes()
        assert stored == scrub_env_values(replay[path][1].encode())
        assert b'"READY_FILE": "<redacted>"' in stored.replace(b'\\"', b'"')
    assert len(parse_actors((writer.root / str(records["actors"].artifact)).read_bytes())) == 3
    assert (
        parse_jobs((writer.root / str(records["jobs"].artifact)).read_bytes())[0].driver_pid == 3349
    )
    assert "limit=10000" in records["actors"].meta["query"]
    assert "filter_values=RUNNING" in records["tasks_running"].meta["query"]
    assert records["node_summary"].meta["endpoint"] == "/nodes"
    # what does not change between samples is asked at the first only (issue 26)
    assert not {"version", "profiling_enabled"} & set(records)
    first = {r.target for r in capture_state(writer, DashboardClient(url), sample=0)}
    assert {"version", "profiling_enabled"} <= first


def test_capture_state_outcomes_for_errors(
    dashboard: tuple[str, type[_Dashboard]], writer: BundleWriter, no_ambient_token: None
) -> None:
    url, handler = dashboard
    del handler.answers["/api/profiling_enabled"]  # an older Ray without this route
    handler.answers["/api/v0/tasks"] = (200, '{"result": false, "msg": "GCS is down", "data": {}}')
    records = {r.target: r for r in capture_state(writer, DashboardClient(url), sample=0)}
    assert records["profiling_enabled"].outcome is Outcome.UNAVAILABLE
    assert records["tasks_running"].outcome is Outcome.FAILED
    assert "GCS is down" in str(records["tasks_running"].reason)
    assert records["actors"].outcome is Outcome.OK


def test_capture_state_with_nobody_listening(writer: BundleWriter) -> None:
    from slime_hangdoctor_demo.cluster import free_ports

    (port,) = free_ports(1)
    records = capture_state(writer, DashboardClient(f"http://127.0.0.1:{port}", token=""), sample=0)
    assert {r.outcome for r in records} == {Outcome.UNAVAILABLE}
    assert all(r.artifact is None for r in records)


# --------------------------------------------------------------------------- client


def test_client_timeout_and_body_cap(
    dashboard: tuple[str, type[_Dashboard]], no_ambient_token: None
) -> None:
    url, _ = dashboard
    res = DashboardClient(url, timeout=0.5).get("/slow")
    assert res.status is None and res.timed_out and "timed out" in str(res.error)
    res = DashboardClient(url, timeout=0.5).get("/stall")
    assert res.status is None and res.timed_out, res
    res = DashboardClient(url, max_body=1000).get("/big")
    assert res.status == 200 and res.truncated and len(res.body) == 1000


def test_worker_traceback_403_means_profiling_disabled(
    dashboard: tuple[str, type[_Dashboard]], writer: BundleWriter, no_ambient_token: None
) -> None:
    url, _ = dashboard
    rec = worker_traceback(
        writer, DashboardClient(url), pid=3445, node_ip="192.0.2.2", sample=0, timeout=2.0
    )
    assert (rec.outcome, rec.reason) == (Outcome.DENIED, PROFILING_HELP)
    assert rec.meta["pid"] == 3445 and rec.artifact is None
    rec = worker_traceback(writer, DashboardClient(url), pid=1, node_ip=None, sample=0, timeout=2.0)
    assert rec.outcome is Outcome.UNAVAILABLE


# --------------------------------------------------------------------------- tokens


def test_token_is_sent_as_bearer(
    dashboard: tuple[str, type[_Dashboard]], no_ambient_token: None
) -> None:
    url, handler = dashboard
    handler.token = TOKEN
    assert DashboardClient(url, token="").get("/api/version").status == 401
    assert DashboardClient(url, token="wrong").get("/api/version").status == 403
    assert DashboardClient(url, token=TOKEN).get("/api/version").status == 200
    assert handler.seen_auth[-1] == f"Bearer {TOKEN}"


def test_resolve_needs_and_uses_the_token(
    dashboard: tuple[str, type[_Dashboard]], no_ambient_token: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, handler = dashboard
    handler.token = TOKEN
    with pytest.raises(RayUnreachable, match="wants a token") as err:
        resolve_cluster(url, timeout=3, token=None)
    assert "RAY_AUTH_TOKEN" in err.value.help_text
    cluster = resolve_cluster(url, timeout=3, token=TOKEN)
    assert (cluster.dashboard_url, cluster.ray_version) == (url, "2.60.0")
    monkeypatch.setenv("RAY_AUTH_TOKEN", TOKEN)
    assert resolve_cluster(url, timeout=3, token=None).dashboard_url == url


def test_resolve_token_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path_file = tmp_path / "token-file"
    path_file.write_text("from-path\n")
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("from-home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-env")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(path_file))
    assert resolve_token("explicit") == "explicit"
    assert resolve_token(None) == "from-env"
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    assert resolve_token(None) == "from-path"
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH")
    assert resolve_token(None) == "from-home"
    (home / ".ray" / "auth_token").unlink()
    assert resolve_token(None) is None


# --------------------------------------------------------------------------- address forms


def test_resolve_rejects_a_non_ray_http_server(
    dashboard: tuple[str, type[_Dashboard]], no_ambient_token: None
) -> None:
    url, handler = dashboard
    handler.answers["/api/version"] = (200, "<html>hello</html>")
    with pytest.raises(RayUnreachable, match="not as a Ray dashboard"):
        resolve_cluster(url, timeout=3, token=None)


def test_resolve_bare_host_port_that_is_a_dashboard_not_a_gcs(
    dashboard: tuple[str, type[_Dashboard]], no_ambient_token: None
) -> None:
    url, _ = dashboard
    bare = url.removeprefix("http://")
    cluster = resolve_cluster(bare, timeout=5, token=None)
    assert cluster.dashboard_url == url and cluster.gcs_address is None
    assert f"gcs {bare}" in cluster.tried


def test_resolve_auto_prefers_ray_api_server_address(
    dashboard: tuple[str, type[_Dashboard]],
    no_ambient_token: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    url, _ = dashboard
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", url)
    cluster = resolve_cluster("auto", timeout=3, token=None, ray_temp_dir=tmp_path)
    assert cluster.dashboard_url == url
    assert cluster.tried[0].startswith("RAY_API_SERVER_ADDRESS=")


def test_resolve_unknown_scheme_and_nothing_local(no_ambient_token: None, tmp_path: Path) -> None:
    with pytest.raises(RayUnreachable, match="unknown scheme"):
        resolve_cluster("grpc://127.0.0.1:1", timeout=2, token=None)
    if DashboardClient("http://127.0.0.1:8265", token="").get("/api/version").status is not None:
        pytest.skip("a dashboard listens on the default port 127.0.0.1:8265 on this machine")
    with pytest.raises(RayUnreachable) as err:
        resolve_cluster(None, timeout=2, token=None, ray_temp_dir=tmp_path)
    assert "http://127.0.0.1:8265" in str(err.value)


def test_a_body_cut_at_the_cap_is_not_kept_with_its_env_values(
    dashboard: tuple[str, type[_Dashboard]], writer: BundleWriter, no_ambient_token: None
) -> None:
    """Issue 15 point 4: an /api/jobs/ answer cut at the body cap is not JSON, so its runtime-env
    values cannot be blanked by structure: the body is not kept, and the record says why (a
    blind spot). Before: the cut body was stored with every env_vars value in it."""
    url, handler = dashboard
    secret = "SECRET-cut-envvalue-77aa"
    doc = json.loads(handler.answers["/api/jobs/"][1])
    doc[0]["runtime_env"] = {"env_vars": {"TEAM_CRED": secret}, "pip": ["x"] * 50}
    handler.answers = {**handler.answers, "/api/jobs/": (200, json.dumps(doc))}
    body = json.dumps(doc).encode()
    cap = body.index(secret.encode()) + len(secret) + 10
    assert scrub_env_values(body[:cap]) is None
    client = DashboardClient(url, max_body=cap)
    records = {r.target: r for r in capture_state(writer, client, sample=0)}
    jobs = records["jobs"]
    assert jobs.outcome is Outcome.FAILED and jobs.artifact is None
    assert "runtime-env values that could not be blanked" in str(jobs.reason)
    for f in writer.root.rglob("*"):
        assert not f.is_file() or secret.encode() not in f.read_bytes()


def test_a_token_read_from_ray_auth_token_path_joins_the_known_secrets(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Point 6: like --ray-token, the token Ray reads from RAY_AUTH_TOKEN_PATH (or
    ~/.ray/auth_token) is blanked wherever it shows up."""
    from slime_hangdoctor.collect.options import CollectOptions

    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    path = tmp_path / "auth_token"
    path.write_text("SECRET-tokenfile-0f1e2d\n")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(path))
    assert "SECRET-tokenfile-0f1e2d" in CollectOptions().secrets()
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH")
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("SECRET-homefile-3c4b5a")
    assert "SECRET-homefile-3c4b5a" in CollectOptions().secrets()
    w = BundleWriter(tmp_path / "b", command="t", known_secrets=CollectOptions().secrets())
    w.target["echo"] = "Bearer SECRET-homefile-3c4b5a"
    w.finish()
    assert b"SECRET-homefile" not in (tmp_path / "b" / "manifest.json").read_bytes()


def test_url_credentials_given_to_the_doctor_join_the_known_secrets() -> None:
    """Point 3: the credentials in --sglang-url / --router-url / the Ray address."""
    from slime_hangdoctor.collect.options import CollectOptions

    opts = CollectOptions(
        sglang_urls=("http://eng:SECRET-sgl-pw-1@127.0.0.1:1",),
        router_urls=("http://r:SECRET-rt-pw-2@h:2",),
    )
    found = opts.secrets("http://ray:SECRET-ray-pw-3@head:8265")
    for pw in ("SECRET-sgl-pw-1", "SECRET-rt-pw-2", "SECRET-ray-pw-3"):
        assert pw in found

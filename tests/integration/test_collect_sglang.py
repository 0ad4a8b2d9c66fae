"""The read-only SGLang / router prober against the stand-in and against misbehaving sockets."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests

from slime_hangdoctor.bundle import BundleWriter, ProbeRecord
from slime_hangdoctor.collect.sglang import (
    BODY_CAP,
    probe_engine,
    probe_router,
    server_info_held,
)
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.sglang import (
    ROUTER,
    SGLANG,
    parse_loads,
    parse_metrics,
    parse_model_info,
    parse_server_info,
)
from tests.integration.sglang_standin_harness import Standin, free_port, start_standin

READ_ONLY = {
    "/model_info",
    "/get_model_info",
    "/server_info",
    "/get_server_info",
    "/v1/loads",
    "/get_load",
    "/metrics",
    "/ready",
    "/ping",
}
DEFAULT_PATHS = ["/model_info", "/server_info", "/v1/loads", "/metrics", "/ready", "/ping"]

Start = Callable[..., Standin]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    started: list[Standin] = []

    def _start(*args: str, env: dict[str, str] | None = None) -> Standin:
        s = start_standin(tmp_path, *args, env=env)
        started.append(s)
        return s

    yield _start
    for s in started:
        s.stop()


@pytest.fixture
def writer(tmp_path: Path) -> BundleWriter:
    return BundleWriter(tmp_path / "bundle", command="test", known_secrets=("sekrit-key",))


def by_path(records: list[ProbeRecord]) -> dict[str, ProbeRecord]:
    return {r.meta["path"]: r for r in records}


def artefact(writer: BundleWriter, rec: ProbeRecord) -> bytes:
    assert rec.artifact is not None, rec
    return (writer.root / rec.artifact).read_bytes()


def timed_probe(budget: float, fn: Callable[[], list[ProbeRecord]]) -> list[ProbeRecord]:
    tic = time.monotonic()
    records = fn()
    assert time.monotonic() - tic <= budget + 1.0, "the prober overran its budget"
    return records


# --------------------------------------------------------------------------- fake servers


class FakeHTTP:
    """A loopback HTTP server answering fixed (status, body) per path; 404 otherwise."""

    def __init__(self, answers: dict[str, tuple[int, bytes]]) -> None:
        outer = self
        self.answers = answers
        self.seen: list[tuple[str, str, str | None]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.seen.append(("GET", self.path, self.headers.get("Authorization")))
                status, body = outer.answers.get(self.path, (404, b'{"detail":"Not Found"}'))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class BlackHole:
    """Accepts connections and reads the request, but never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.conns: list[socket.socket] = []
        self.stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self) -> None:
        self.stop = True
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.fixture
def fake() -> Iterator[Callable[[dict[str, tuple[int, bytes]]], FakeHTTP]]:
    made: list[FakeHTTP] = []

    def _make(answers: dict[str, tuple[int, bytes]]) -> FakeHTTP:
        f = FakeHTTP(answers)
        made.append(f)
        return f

    yield _make
    for f in made:
        f.close()


# --------------------------------------------------------------------------- against the stand-in


def test_healthy_engine_default_probe_is_read_only(start: Start, writer: BundleWriter) -> None:
    s = start()
    records = timed_probe(
        5.0, lambda: probe_engine(writer, s.url, node_ip="127.0.0.1", sample=0, timeout=5.0)
    )
    assert [r.meta["path"] for r in records] == DEFAULT_PATHS
    for rec in records:
        assert rec.outcome is Outcome.OK, rec
        assert rec.source == SGLANG and rec.sample == 0 and rec.node_ip == "127.0.0.1"
        status = 404 if rec.meta["path"] == "/ready" else 200  # /ready exists from 0.5.20 on
        assert rec.meta["status"] == status and rec.meta["url"] == s.url
        assert rec.meta["error"] is None
        assert rec.meta["truncated"] is False and rec.elapsed_s >= 0
        assert rec.target.startswith(f"127.0.0.1_{s.port}_")
    got = by_path(records)
    assert parse_model_info(artefact(writer, got["/model_info"])).model_path == "demo/model"
    assert parse_server_info(artefact(writer, got["/server_info"])).internal_states_count == 1
    assert parse_loads(artefact(writer, got["/v1/loads"])).running == 0
    # no realtime series before the first batch (metrics_collector.py:1203-1217)
    assert parse_metrics(artefact(writer, got["/metrics"])).decode_tokens_total is None
    assert str(got["/metrics"].artifact).endswith(".s0.txt")
    logged = s.logged()
    assert sorted(e["path"] for e in logged) == sorted(DEFAULT_PATHS)
    assert all(e["method"] == "GET" and e["path"] in READ_ONLY for e in logged)


def test_stuck_engine(start: Start, writer: BundleWriter) -> None:
    s = start("--fault", "stuck_scheduler")
    threading.Thread(
        target=lambda: _quiet_post(
            s.url + "/generate", {"input_ids": [1], "sampling_params": {"max_new_tokens": 40}}
        ),
        daemon=True,
    ).start()
    deadline = time.monotonic() + 10
    # `{"loads": []}` until the scheduler published its first snapshot
    while [x["num_running_reqs"] for x in s.get("/v1/loads").json()["loads"][:1]] != [
        1
    ] and time.monotonic() < deadline:
        time.sleep(0.05)
    records = timed_probe(
        5.0, lambda: probe_engine(writer, s.url, node_ip=None, sample=1, timeout=5.0)
    )
    got = by_path(records)
    assert all(r.outcome is Outcome.OK for p, r in got.items() if p != "/server_info"), records
    assert parse_loads(artefact(writer, got["/v1/loads"])).running == 1
    # On 0.5.15 a /server_info that times out would poison the endpoint: with a request in flight
    # it is not sent, and the record says why.
    info = got["/server_info"]
    assert info.outcome is Outcome.UNAVAILABLE and info.meta["not_sent"] is True, info
    assert info.artifact is None and "1 running" in str(info.reason)
    assert "/server_info" not in {e["path"] for e in s.logged()}
    assert all(e["method"] == "GET" for e in s.logged() if e["path"] != "/generate")


def test_doctor_probe_leaves_server_info_working_after_a_3s_stall(
    start: Start, writer: BundleWriter
) -> None:
    """Issue 25 item 7: a 0.5.15-shaped engine whose scheduler stalls for 3 s (its process stopped)
    while it generates. The doctor probes it twice in the stall; afterwards `/server_info` still
    answers with its states (one doctor call that timed out would have left it answering
    `internal_states: []` for everyone, communicator.py:38-58)."""
    s = start()
    assert s.get("/v1/loads").json()["version"].startswith("0.5.15")
    stop = threading.Event()

    def traffic() -> None:
        body = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 40}}
        while not stop.is_set():
            _quiet_post(s.url + "/generate", body)

    worker = threading.Thread(target=traffic, daemon=True)
    worker.start()
    time.sleep(0.5)
    scheduler = psutil.Process(s.scheduler_pid())
    records: list[ProbeRecord] = []
    scheduler.suspend()
    tic = time.monotonic()
    try:
        for sample in (0, 1):
            records += probe_engine(writer, s.url, node_ip=None, sample=sample, timeout=2.5)
    finally:
        time.sleep(max(0.0, 3.0 - (time.monotonic() - tic)))
        scheduler.resume()
        stop.set()
    infos = [r for r in records if r.meta["path"] == "/server_info"]
    assert len(infos) == 2 and all(r.meta.get("not_sent") for r in infos), infos
    worker.join(30)
    answer = s.get("/server_info", timeout=5.0)
    assert answer.elapsed.total_seconds() < 1.5
    assert parse_server_info(answer.content).internal_states_count == 1, answer.text[:300]


def test_server_info_held_back_at_one_sample_is_held_back_at_the_next(
    start: Start, writer: BundleWriter
) -> None:
    """A scheduler the first sample saw silent is not asked `/server_info` at the second, though
    nothing shows it then (as in the gap between two of slime's warm-up attempts): on 0.5.15 the
    call would hold the sample 2 s and poison the endpoint. The control, asked anyway, does both."""
    s = start()
    http = psutil.Process(s.proc.pid)
    http.suspend()  # the first sample: the HTTP process answers nothing
    try:
        first = by_path(probe_engine(writer, s.url, node_ip=None, sample=0, timeout=1.5))
    finally:
        http.resume()
    assert first["/server_info"].meta.get("not_sent") is True, first["/server_info"]
    held = server_info_held(writer.records, s.url, before=1)
    assert held is not None and held.startswith("sample 0: the HTTP process did not answer"), held
    assert server_info_held(writer.records, s.url, before=0) is None
    scheduler = psutil.Process(s.scheduler_pid())
    scheduler.suspend()  # the second sample: stuck, and nothing in flight shows it
    try:
        tic = time.monotonic()
        second = by_path(
            probe_engine(writer, s.url, node_ip=None, sample=1, timeout=2.5, held=held)
        )
        took = time.monotonic() - tic
        info = second["/server_info"]
        assert info.meta.get("not_sent") is True, info
        assert info.reason is not None and "held back since sample 0" in info.reason, info.reason
        assert took < 1.5, took
        control = by_path(probe_engine(writer, s.url, node_ip=None, sample=2, timeout=2.5))
        assert control["/server_info"].meta.get("not_sent") is None, control["/server_info"]
        assert control["/server_info"].elapsed_s >= 1.9, control["/server_info"]
    finally:
        scheduler.resume()


def test_server_info_answered_empty_is_held_back_at_later_samples(
    start: Start, writer: BundleWriter
) -> None:
    """Issue 46 item 5: a scheduler silent with nothing in flight (its process stopped) is asked
    `/server_info` at the first sample, whose first reads show nothing; slime's patch answers
    `internal_states: []` after its 2 s wait. On 0.5.15 the later samples of the run do not ask
    again (2 s more each, and one that timed out would poison the endpoint)."""
    s = start()
    scheduler = psutil.Process(s.scheduler_pid())
    scheduler.suspend()
    try:
        first = by_path(probe_engine(writer, s.url, node_ip=None, sample=0, timeout=3.0))
        info = first["/server_info"]
        assert info.meta.get("not_sent") is None and info.elapsed_s >= 1.9, info
        assert parse_server_info(artefact(writer, info)).empty_internal_states, info
        held = server_info_held(writer.records, s.url, before=1)
        assert held is not None and "internal_states: [] after" in held, held
        assert held.startswith("sample 0: ") and "0.5.15" in held, held
        tic = time.monotonic()
        second = by_path(
            probe_engine(writer, s.url, node_ip=None, sample=1, timeout=3.0, held=held)
        )
        took = time.monotonic() - tic
        again = second["/server_info"]
        assert again.meta.get("not_sent") is True, again
        assert again.reason is not None and "held back since sample 0" in again.reason
        assert took < 1.5, took
        assert server_info_held(writer.records, s.url, before=2) == held
        # the control, asked anyway, pays the 2 s again
        control = by_path(probe_engine(writer, s.url, node_ip=None, sample=2, timeout=3.0))
        assert control["/server_info"].meta.get("not_sent") is None, control["/server_info"]
        assert control["/server_info"].elapsed_s >= 1.9, control["/server_info"]
    finally:
        scheduler.resume()


def _quiet_post(url: str, body: dict[str, Any]) -> None:
    try:
        requests.post(url, json=body, timeout=60)
    except requests.RequestException:
        pass


def test_api_key_denied_then_accepted_and_redacted(start: Start, writer: BundleWriter) -> None:
    s = start("--api-key", "sekrit-key")
    denied = by_path(probe_engine(writer, s.url, node_ip=None, sample=0, timeout=5.0))
    for path in ("/model_info", "/server_info", "/v1/loads"):
        assert denied[path].outcome is Outcome.DENIED and denied[path].meta["status"] == 401
    assert denied["/metrics"].outcome is Outcome.OK  # /metrics is never behind the key
    ok = probe_engine(writer, s.url, node_ip=None, sample=1, timeout=5.0, api_key="sekrit-key")
    assert all(r.outcome is Outcome.OK for r in ok), ok
    for rec in ok:
        assert b"sekrit-key" not in artefact(writer, rec)
    assert json.loads(artefact(writer, by_path(ok)["/server_info"]))["api_key"] == "<redacted>"


def test_health_endpoints_are_opt_in(start: Start, writer: BundleWriter) -> None:
    s = start()
    probe_engine(writer, s.url, node_ip=None, sample=0, timeout=5.0)
    assert not [e for e in s.logged() if e["path"].startswith("/health")]
    records = probe_engine(
        writer, s.url, node_ip=None, sample=1, timeout=5.0, health=True, health_generate=True
    )
    got = by_path(records)
    assert got["/health"].outcome is Outcome.OK and got["/health_generate"].outcome is Outcome.OK
    assert artefact(writer, got["/health"]) == b""
    assert {"/health", "/health_generate"} <= {e["path"] for e in s.logged()}


def test_never_healthy_health_is_failed_503(start: Start, writer: BundleWriter) -> None:
    s = start("--fault", "never_healthy")
    got = by_path(probe_engine(writer, s.url, node_ip=None, sample=0, timeout=3.0, health=True))
    assert got["/health"].outcome is Outcome.FAILED and got["/health"].meta["status"] == 503
    assert got["/model_info"].outcome is Outcome.OK


# --------------------------------------------------------------------------- misbehaving peers


def test_dead_port_is_unavailable(writer: BundleWriter) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    records = timed_probe(
        2.0, lambda: probe_engine(writer, url, node_ip=None, sample=0, timeout=2.0)
    )
    assert [r.meta["path"] for r in records] == DEFAULT_PATHS
    for rec in records:
        assert rec.outcome is Outcome.UNAVAILABLE and rec.reason == "connection refused"
        assert rec.artifact is None and rec.meta["status"] is None
        assert rec.meta["error"] == "connection refused"


def test_accepting_socket_that_never_answers_times_out_in_budget(writer: BundleWriter) -> None:
    hole = BlackHole()
    try:
        records = timed_probe(
            1.5, lambda: probe_engine(writer, hole.url, node_ip=None, sample=0, timeout=1.5)
        )
    finally:
        hole.close()
    assert [r.meta["path"] for r in records] == DEFAULT_PATHS
    asked = [r for r in records if r.meta["path"] != "/server_info"]
    assert all(r.outcome is Outcome.TIMED_OUT for r in asked), records
    assert all("timed out" in (r.reason or "") for r in asked)
    # nothing answered in time: /server_info, which one timeout poisons on 0.5.15, is not sent
    assert by_path(records)["/server_info"].meta.get("not_sent") is True


def test_trickling_body_is_cut_at_the_budget(writer: BundleWriter) -> None:
    """Headers at once, then one byte every 0.2 s: per-read timeouts never fire, the budget does."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        try:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
            while not stop.wait(0.2):
                conn.sendall(b"#")
        except OSError:
            pass
        finally:
            conn.close()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    url = f"http://127.0.0.1:{srv.getsockname()[1]}"
    try:
        records = timed_probe(
            1.5, lambda: probe_engine(writer, url, node_ip=None, sample=0, timeout=1.5)
        )
    finally:
        stop.set()
        srv.close()
    asked = [r for r in records if not r.meta.get("not_sent")]
    assert all(r.outcome is Outcome.TIMED_OUT for r in asked), records


def test_garbage_bodies_fail_but_are_kept(
    fake: Callable[..., FakeHTTP], writer: BundleWriter
) -> None:
    garbage = (200, b"<html>garbage</html>")
    f = fake(dict.fromkeys(DEFAULT_PATHS, garbage))
    records = probe_engine(writer, f.url, node_ip=None, sample=0, timeout=3.0)
    assert [r.meta["path"] for r in records] == DEFAULT_PATHS
    for rec in records:
        if rec.meta["path"] in ("/ready", "/ping"):  # the status is the answer, the body unread
            assert rec.outcome is Outcome.OK
        else:
            assert rec.outcome is Outcome.FAILED and (rec.reason or "").startswith(
                "answer not understood"
            )
        assert artefact(writer, rec) == garbage[1]


def test_http_500_fails_and_keeps_body(fake: Callable[..., FakeHTTP], writer: BundleWriter) -> None:
    f = fake({"/model_info": (500, b'{"error": {"message": "boom"}}')})
    got = by_path(probe_engine(writer, f.url, node_ip=None, sample=0, timeout=3.0))
    assert got["/model_info"].outcome is Outcome.FAILED and got["/model_info"].reason == "HTTP 500"
    assert b"boom" in artefact(writer, got["/model_info"])


def test_old_sglang_fallback_paths(fake: Callable[..., FakeHTTP], writer: BundleWriter) -> None:
    f = fake(
        {
            "/get_model_info": (200, b'{"model_path": "old/model", "is_generation": true}'),
            "/get_server_info": (
                200,
                b'{"model_path": "old/model", "internal_states": [{}], "version": "0.4.6"}',
            ),
            "/get_load": (200, b'{"load": 0}'),
        }
    )
    records = probe_engine(writer, f.url, node_ip=None, sample=0, timeout=3.0)
    paths = [r.meta["path"] for r in records]
    assert paths == [
        "/model_info",
        "/get_model_info",
        "/server_info",
        "/get_server_info",
        "/v1/loads",
        "/get_load",
        "/metrics",
        "/ready",
        "/ping",
    ]
    got = by_path(records)
    for new, old in (
        ("/model_info", "/get_model_info"),
        ("/server_info", "/get_server_info"),
        ("/v1/loads", "/get_load"),
    ):
        assert got[new].outcome is Outcome.FAILED and got[new].meta["fallback"] == old
        assert got[old].outcome is Outcome.OK
    assert parse_loads(artefact(writer, got["/get_load"])).running == 0
    assert got["/metrics"].outcome is Outcome.FAILED and got["/metrics"].meta["status"] == 404


def test_body_cap_truncates(fake: Callable[..., FakeHTTP], writer: BundleWriter) -> None:
    big = b"#" + b" " * (BODY_CAP + 1000) + b"\n"
    f = fake({"/metrics": (200, big)})
    got = by_path(probe_engine(writer, f.url, node_ip=None, sample=0, timeout=5.0))
    rec = got["/metrics"]
    # past the cap an answer is not SGLang's: not kept (bounded memory, redaction and parse time)
    assert rec.meta["truncated"] is True and rec.outcome is Outcome.FAILED
    assert rec.artifact is None and rec.reason is not None and "not kept" in rec.reason


# --------------------------------------------------------------------------- router


def test_router_workers(fake: Callable[..., FakeHTTP], writer: BundleWriter) -> None:
    body = json.dumps(
        {"workers": [{"id": "a", "url": "http://127.0.0.1:15000"}], "total": 1, "stats": {}}
    )
    f = fake({"/workers": (200, body.encode())})
    (rec,) = probe_router(writer, f.url, node_ip="127.0.0.1", sample=0, timeout=3.0, api_key="rk")
    assert rec.source == ROUTER and rec.outcome is Outcome.OK and rec.meta["path"] == "/workers"
    assert f.seen == [("GET", "/workers", "Bearer rk")]


def test_old_router_list_workers(fake: Callable[..., FakeHTTP], writer: BundleWriter) -> None:
    f = fake({"/list_workers": (200, b'{"urls": ["http://127.0.0.1:15000"]}')})
    records = probe_router(
        writer, f.url.removeprefix("http://"), node_ip=None, sample=0, timeout=3.0
    )
    assert [(r.meta["path"], r.outcome) for r in records] == [
        ("/workers", Outcome.FAILED),
        ("/list_workers", Outcome.OK),
    ]


def test_router_dead(writer: BundleWriter) -> None:
    (rec,) = probe_router(writer, f"127.0.0.1:{free_port()}", node_ip=None, sample=0, timeout=1.0)
    assert rec.outcome is Outcome.UNAVAILABLE

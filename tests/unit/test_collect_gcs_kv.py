"""The GCS's KV read without Ray (collect/gcs_kv.py): the messages protobuf's runtime builds are
Ray's own on the wire, a real gRPC server built from Ray's generated classes answers them, a
dawdling or non-gRPC peer costs at most the timeout, and the whole resolution of a `host:port`
address imports no `ray`."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from slime_hangdoctor.collect import gcs_kv
from slime_hangdoctor.collect.gcs_kv import GcsFailure, kv_get, parse_reply, request_bytes

pb2 = pytest.importorskip("ray.core.generated.gcs_service_pb2")
grpc = pytest.importorskip("grpc")

KV = "ray.rpc.InternalKVGcsService"


def test_the_built_messages_have_rays_fields() -> None:
    """Field by field (name, number, wire type) against the installed Ray's generated classes:
    a change of Ray's protocol fails here."""
    request, reply, status = gcs_kv._messages()
    wire = {12: 2, 11: 2, 9: 2, 5: 0}  # bytes, message, string: length-delimited; int32: varint

    def fields(descriptor: Any) -> list[tuple[str, int, int]]:
        return [(f.name, f.number, wire[f.type]) for f in descriptor.fields]

    assert fields(request.DESCRIPTOR) == fields(pb2.InternalKVGetRequest.DESCRIPTOR)
    assert fields(reply.DESCRIPTOR) == fields(pb2.InternalKVGetReply.DESCRIPTOR)
    gcs_status = pb2.InternalKVGetReply.DESCRIPTOR.fields_by_name["status"].message_type
    assert fields(status.DESCRIPTOR) == fields(gcs_status)
    service = pb2.DESCRIPTOR.services_by_name["InternalKVGcsService"]
    assert (
        f"/{service.full_name}/{service.methods_by_name['InternalKVGet'].name}"
        == gcs_kv.KV_GET_METHOD
    )


def test_request_and_reply_bytes_are_rays() -> None:
    ours = request_bytes(b"dashboard", b"dashboard")
    assert (
        ours
        == pb2.InternalKVGetRequest(key=b"dashboard", namespace=b"dashboard").SerializeToString()
    )
    theirs = pb2.InternalKVGetReply(value=b"127.0.0.1:8265")
    assert parse_reply(theirs.SerializeToString()).value == b"127.0.0.1:8265"
    missing = pb2.InternalKVGetReply()
    missing.status.code, missing.status.message = 17, "Failed to find the key"
    got = parse_reply(missing.SerializeToString())
    assert got.value is None and got.failure is GcsFailure.EMPTY and "17" in got.detail
    assert parse_reply(b"\x0a\xff\xff").failure is GcsFailure.OTHER  # cut inside a field


@dataclass
class Gcs:
    port: int
    value: bytes
    calls: list[tuple[bytes, bytes, dict[str, str]]] = field(default_factory=list)
    replied_at: list[float] = field(default_factory=list)


@contextmanager
def real_grpc_gcs(value: bytes, *, token: str | None = None, delay_s: float = 0.0) -> Iterator[Gcs]:
    """A gRPC server with Ray's generated (de)serialisers for InternalKVGet; with `token`, a call
    without `authorization: Bearer <token>` ends UNAUTHENTICATED, as Ray's interceptor does;
    `delay_s`: it answers that late (a busy GCS). `replied_at`: when it answered."""
    gcs = Gcs(0, value)

    def kv_get_handler(request: Any, context: Any) -> Any:
        metadata = dict(context.invocation_metadata())
        gcs.calls.append((request.key, request.namespace, metadata))
        if token is not None and metadata.get("authorization") != f"Bearer {token}":
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "invalid token")
        time.sleep(delay_s)
        gcs.replied_at.append(time.monotonic())
        return pb2.InternalKVGetReply(value=gcs.value)

    handler = grpc.method_handlers_generic_handler(
        KV,
        {
            "InternalKVGet": grpc.unary_unary_rpc_method_handler(
                kv_get_handler,
                request_deserializer=pb2.InternalKVGetRequest.FromString,
                response_serializer=pb2.InternalKVGetReply.SerializeToString,
            )
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    gcs.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield gcs
    finally:
        server.stop(0)


def test_kv_get_asks_a_real_grpc_server() -> None:
    with real_grpc_gcs(b"127.0.0.1:8265") as gcs:
        got = kv_get(f"127.0.0.1:{gcs.port}", b"dashboard", b"dashboard", token=None, timeout=5)
    assert got.value == b"127.0.0.1:8265", got
    assert gcs.calls and gcs.calls[0][:2] == (b"dashboard", b"dashboard")
    assert "authorization" not in gcs.calls[0][2]


def test_kv_get_sends_the_token_as_ray_does() -> None:
    with real_grpc_gcs(b"10.0.0.1:8265", token="tok-1") as gcs:
        address = f"127.0.0.1:{gcs.port}"
        refused = kv_get(address, b"dashboard", b"dashboard", token=None, timeout=5)
        got = kv_get(address, b"dashboard", b"dashboard", token="tok-1", timeout=5)
    assert refused.failure is GcsFailure.UNAUTHENTICATED
    assert got.value == b"10.0.0.1:8265"


@contextmanager
def silent_listener() -> Iterator[int]:
    """Accepts connections (the kernel's backlog) and never says a word."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def test_a_silent_peer_costs_the_timeout_and_no_more() -> None:
    with silent_listener() as port:
        t0 = time.monotonic()
        got = kv_get(f"127.0.0.1:{port}", b"dashboard", b"dashboard", token=None, timeout=0.8)
        spent = time.monotonic() - t0
    assert got.value is None and got.failure in (GcsFailure.TIMEOUT, GcsFailure.UNREACHABLE)
    assert spent < 0.8 + 0.7, spent


class _Http(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()


def test_an_http_server_is_not_a_gcs() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Http)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        got = kv_get(
            f"127.0.0.1:{server.server_address[1]}",
            b"dashboard",
            b"dashboard",
            token=None,
            timeout=3,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert got.value is None and got.failure is not None


def test_resolving_a_gcs_address_imports_no_ray() -> None:
    """The whole `host:port` resolution in a fresh interpreter, against a real gRPC GCS naming a
    real HTTP dashboard: the dashboard is found, and `ray` is not in sys.modules afterwards."""

    class Dashboard(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            body = b'{"ray_version": "2.60.0", "session_name": "session_x", "version": "4"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Dashboard)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    dash = f"127.0.0.1:{server.server_address[1]}"
    code = (
        "import sys\n"
        "from slime_hangdoctor.collect.address import resolve_cluster\n"
        "c = resolve_cluster(sys.argv[1], timeout=8, token=None)\n"
        "print(c.dashboard_url, 'ray' in sys.modules)\n"
    )
    try:
        with real_grpc_gcs(dash.encode()) as gcs:
            out = subprocess.run(
                [sys.executable, "-c", code, f"127.0.0.1:{gcs.port}"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
    finally:
        server.shutdown()
        server.server_close()
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [f"http://{dash}", "False"], out.stdout


class _Recording(BaseHTTPRequestHandler):
    """A Ray dashboard's /api/version, recording when each request arrived."""

    arrived: list[float] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        type(self).arrived.append(time.monotonic())
        body = b'{"ray_version": "2.60.0", "session_name": "session_x", "version": "4"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def recording_dashboard() -> Iterator[tuple[str, list[float]]]:
    handler = type("Recording", (_Recording,), {"arrived": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", handler.arrived
    finally:
        server.shutdown()
        server.server_close()


def test_the_likely_dashboard_is_asked_while_the_gcs_answers_and_the_gcs_wins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """`127.0.0.1:<gcs>`: port 8265 of that host (here moved to a free port) is asked at the same
    time as the GCS, which answers late; the GCS's own dashboard is still the answer (it comes
    first in order: port 8265 may be another cluster's), and the guess was asked before the GCS
    replied (so a GCS that fails costs no second round trip)."""
    from slime_hangdoctor.collect import address

    for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "none"))
    with recording_dashboard() as (guess, guessed), recording_dashboard() as (own, owned):
        monkeypatch.setattr(address, "DEFAULT_DASHBOARD_PORT", int(guess.rpartition(":")[2]))
        with real_grpc_gcs(own.encode(), delay_s=0.6) as gcs:
            cluster = address.resolve_cluster(f"127.0.0.1:{gcs.port}", timeout=8, token=None)
    assert cluster.dashboard_url == f"http://{own}", cluster
    assert gcs.replied_at and guessed and owned
    assert guessed[0] < gcs.replied_at[0] < owned[0]

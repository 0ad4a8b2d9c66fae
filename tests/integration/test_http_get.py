"""collect/http.py over real sockets: every way an answer can go wrong ends in a bounded time with
the right kind (a real HTTP server on 127.0.0.1, and a listening socket that never answers)."""

from __future__ import annotations

import gzip
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from slime_hangdoctor.collect.http import (
    BodyDeadline,
    Failure,
    Fetched,
    UnsupportedUrl,
    classify,
    get,
)

BIG = 64 * 1024


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        if self.path == "/ok?x=1":
            self._send(200, b'{"ok": true}', {"Content-Type": "application/json"})
        elif self.path == "/headers":
            self._send(200, repr(sorted(self.headers.items())).encode())
        elif self.path == "/big":
            self._send(200, b"x" * (BIG * 4))
        elif self.path == "/redirect":
            self._send(302, b"", {"Location": "/ok?x=1"})
        elif self.path == "/gzip":
            self._send(200, gzip.compress(b"plain text"), {"Content-Encoding": "gzip"})
        elif self.path == "/deflate":
            self._send(200, zlib.compress(b"plain text"), {"Content-Encoding": "deflate"})
        elif self.path == "/bomb":  # 64 MiB of zeros in ~64 KiB
            self._send(200, gzip.compress(bytes(64 * 2**20)), {"Content-Encoding": "gzip"})
        elif self.path == "/short":  # announces 50 bytes, sends 20, closes
            self.send_response(200)
            self.send_header("Content-Length", "50")
            self.end_headers()
            self.wfile.write(b"x" * 20)
            self.wfile.flush()
            self.close_connection = True
        elif self.path == "/not-gzip":
            self._send(200, b"plain text", {"Content-Encoding": "gzip"})
        elif self.path == "/drip":  # headers at once, then a byte every 0.2 s for 10 s
            self.send_response(200)
            self.send_header("Content-Length", "50")
            self.end_headers()
            for _ in range(50):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.2)

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture()
def silent_port() -> Iterator[int]:
    """A socket that accepts connections (backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def _get(url: str, timeout: float = 1.0, max_body: int = BIG) -> Fetched:
    deadline = time.monotonic() + timeout
    return get(url, {"Accept": "*/*"}, timeout=timeout, deadline=deadline, max_body=max_body)


def test_an_answer_with_its_query_and_content_type(server: str) -> None:
    got = get(server + "/ok?x=1", {}, timeout=2, deadline=time.monotonic() + 2, max_body=BIG)
    assert (got.status, got.body, got.content_type, got.truncated) == (
        200,
        b'{"ok": true}',
        "application/json",
        False,
    )


def test_the_headers_sent_are_the_callers(server: str) -> None:
    got = get(
        server + "/headers",
        {"Authorization": "Bearer t0k3n", "User-Agent": "slime-hangdoctor"},
        timeout=2,
        deadline=time.monotonic() + 2,
        max_body=BIG,
    )
    assert b"Bearer t0k3n" in got.body and b"slime-hangdoctor" in got.body


def test_a_body_over_the_cap_is_cut_and_marked(server: str) -> None:
    got = _get(server + "/big", max_body=BIG)
    assert got.truncated and len(got.body) == BIG


def test_redirects_are_not_followed(server: str) -> None:
    got = _get(server + "/redirect")
    assert got.status == 302 and got.body == b""


def test_a_compressed_body_is_decoded(server: str) -> None:
    assert _get(server + "/gzip").body == b"plain text"
    assert _get(server + "/deflate").body == b"plain text"


def test_the_cap_bounds_the_decoded_body(server: str) -> None:
    """A small gzip body that inflates to 64 MiB is cut at the cap, decoded bytes counted."""
    got = _get(server + "/bomb", timeout=5.0, max_body=BIG)
    assert got.truncated and len(got.body) == BIG and got.body == bytes(BIG)


def test_a_body_that_is_not_what_its_encoding_says(server: str) -> None:
    with pytest.raises(Exception) as caught:
        _get(server + "/not-gzip")
    assert classify(caught.value)[0] is Failure.OTHER


def test_an_answer_shorter_than_announced_is_a_failure(server: str) -> None:
    """Closed after 20 of the 50 bytes its Content-Length announced: not a complete answer."""
    with pytest.raises(Exception) as caught:
        _get(server + "/short")
    kind, text = classify(caught.value)
    assert kind is Failure.OTHER and "IncompleteRead" in text, text


def test_only_http_urls_are_fetched() -> None:
    for url in ("file:///etc/passwd", "ftp://127.0.0.1/x", "http:///no-host"):
        with pytest.raises(UnsupportedUrl):
            _get(url)


def test_a_dripping_body_stops_at_the_deadline(server: str) -> None:
    t0 = time.monotonic()
    with pytest.raises(BodyDeadline) as caught:
        get(server + "/drip", {}, timeout=2.0, deadline=time.monotonic() + 1.0, max_body=BIG)
    assert time.monotonic() - t0 < 2.5
    assert 0 < len(caught.value.partial) < 50


def test_no_answer_is_a_timeout(silent_port: int) -> None:
    t0 = time.monotonic()
    with pytest.raises(Exception) as caught:
        _get(f"http://127.0.0.1:{silent_port}/x", timeout=0.5)
    assert time.monotonic() - t0 < 2.0
    assert classify(caught.value)[0] is Failure.TIMEOUT


def test_a_closed_port_is_refused() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(Exception) as caught:
        _get(f"http://127.0.0.1:{port}/x")
    assert classify(caught.value) == (Failure.REFUSED, "connection refused")


def test_an_unknown_host() -> None:
    with pytest.raises(Exception) as caught:
        _get("http://no-such-host.invalid:8265/x")
    assert classify(caught.value)[0] is Failure.UNKNOWN_HOST


def test_a_proxy_in_the_environment_is_not_used(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The doctor talks to cluster addresses directly (docs/probes.md)."""
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    assert _get(server + "/ok?x=1").status == 200

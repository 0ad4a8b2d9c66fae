"""One bounded HTTP GET, as every probe of a dashboard, an engine or a router makes it.

The standard library's `http.client` (what urllib3 and requests wrap): a connect timeout and a read
timeout, one wall-clock deadline for the whole request (connecting, the TLS handshake, sending,
the status line, the headers and the body: a peer that accepts and then drips bytes anywhere
costs at most the deadline), a size cap, no redirects, no retries, a fresh connection per request (a kept-alive connection the server dropped meanwhile would fail a probe for
nothing), and no proxy: the doctor talks to cluster-internal addresses directly, whatever
HTTP(S)_PROXY says (docs/probes.md). An https URL is verified as urllib3 and requests verify it
(`ssl.create_default_context`). A gzip or deflate body (`Content-Encoding`) is decoded, under the
same cap. Neither requests nor urllib3 is imported: for the same few calls they cost a cron
`check` ~40 ms and ~30 ms of start-up (docs/performance.md).
"""

from __future__ import annotations

import functools
import io
import socket
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from slime_hangdoctor.redact import utf8_prefix

if TYPE_CHECKING:
    from http.client import HTTPResponse

CHUNK = 64 * 1024
# Content-Encoding -> zlib's window bits for it (16 + : a gzip header and trailer; plain: zlib).
_DECODERS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


@dataclass(frozen=True)
class Fetched:
    """A complete answer (or its first `max_body` bytes, `truncated`, less a UTF-8 character
    the cap would split)."""

    status: int
    body: bytes
    content_type: str | None
    truncated: bool = False


class BodyDeadline(Exception):
    """The headers came, the body did not finish by the deadline; `partial` is what came."""

    def __init__(self, partial: bytes) -> None:
        super().__init__("body incomplete at the deadline")
        self.partial = partial


class UnsupportedUrl(ValueError):
    """Not an http:// or https:// URL with a host."""


def get(
    url: str,
    headers: Mapping[str, str],
    *,
    timeout: float,
    deadline: float,
    max_body: int,
) -> Fetched:
    """GET `url`. `timeout` bounds connecting and each read; `deadline` (time.monotonic) the whole
    request: connect, TLS handshake, request, status line, headers and body.

    Raises the transport's exceptions (OSError and its kinds, http.client's HTTPException: an
    answer shorter than its Content-Length is IncompleteRead, as urllib3 and requests say;
    TimeoutError when the deadline passes before the headers are in), UnsupportedUrl and
    BodyDeadline (the deadline passed in the body); the callers classify them into outcomes."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UnsupportedUrl(f"not an http(s) URL: {url!r}")
    limit = max(0.05, timeout)
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=limit)
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=limit)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        # connect, then the TLS handshake under what is left (CPython bounds a whole handshake,
        # and a whole sendall, by the socket's timeout), then send under what is left after it
        conn._create_connection = _connector(limit, deadline)  # type: ignore[attr-defined]
        conn.connect()
        assert conn.sock is not None
        conn.sock.settimeout(_budget(limit, deadline))
        conn.response_class = _deadline_response(limit, deadline)  # type: ignore[assignment]
        conn.request("GET", target, headers=dict(headers))
        resp = conn.getresponse()
        try:
            body, truncated = _read(resp, deadline, max_body)
        finally:
            resp.close()
        return Fetched(resp.status, body, resp.getheader("Content-Type"), truncated)
    finally:
        conn.close()


def _connector(timeout: float, deadline: float) -> Callable[..., socket.socket]:
    """`socket.create_connection` under the deadline, name lookup included, leaving the socket's
    timeout at what is left of it (for the TLS handshake that follows)."""

    def connect(
        address: tuple[str, int], _timeout: object = None, _source: object = None
    ) -> socket.socket:
        host, port = address
        last: OSError | None = None
        for family, kind, proto, _, where in _lookup(host, port, _budget(timeout, deadline)):
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(_budget(timeout, deadline))
                sock.connect(where)
                sock.settimeout(_budget(timeout, deadline))
                return sock
            except OSError as exc:
                sock.close()
                last = exc
                if isinstance(exc, TimeoutError):
                    break  # the budget is spent: no other address gets a fair try
            except BaseException:
                sock.close()
                raise
        raise last or OSError(f"no address for {host!r}")

    return connect


AddrInfo = tuple[socket.AddressFamily, socket.SocketKind, int, str, Any]


def _lookup(host: str, port: int, budget: float) -> Sequence[AddrInfo]:
    """`getaddrinfo` within `budget` seconds. An address given as such needs no lookup (every
    engine URL a router lists, most dashboards): asked at once. A name is looked up on a daemon
    thread left behind at the budget (the resolver has no timeout of its own: a name server that
    dawdles would hold the probe, and the doctor, for its retries)."""
    flags = socket.AI_NUMERICHOST
    try:
        return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, 0, flags)
    except socket.gaierror:
        pass
    found: list[Sequence[AddrInfo] | BaseException] = []
    done = threading.Event()

    def resolve() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            found.append(exc)
        done.set()

    threading.Thread(target=resolve, name="http-lookup", daemon=True).start()
    if not done.wait(budget):
        raise TimeoutError(f"timed out looking up {host!r}")
    if isinstance(found[0], BaseException):
        raise found[0]
    return found[0]


def _budget(timeout: float, deadline: float) -> float:
    """The time one blocking step may take: `timeout`, or what is left of the deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out: the request's deadline passed")
    return min(timeout, left)


class _DeadlineReader(io.RawIOBase):
    """The socket's bytes, each read under what is left of the deadline (`http.client` reads the
    status line and the headers with `readline` through a buffered reader: a per-read socket
    timeout alone lets a peer that sends a byte a second hold it for as long as it likes)."""

    def __init__(self, sock: socket.socket, timeout: float, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)  # a SocketIO: keeps the socket open for us
        self._timeout = timeout
        self._deadline = deadline
        self._set: float | None = None  # the socket timeout last set (a syscall or two to set)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int | None:  # type: ignore[override]
        budget = _budget(self._timeout, self._deadline)
        if budget != self._set:  # the whole `timeout` until the deadline is nearer than that
            self._sock.settimeout(budget)
            self._set = budget
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _DeadlineSocket:
    """What `HTTPResponse` is given instead of the socket: it only calls `makefile("rb")`."""

    def __init__(self, sock: socket.socket, timeout: float, deadline: float) -> None:
        self._sock = sock
        self._timeout = timeout
        self._deadline = deadline

    def makefile(self, mode: str, *args: object, **kwargs: object) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._sock, self._timeout, self._deadline))


def _deadline_response(timeout: float, deadline: float) -> Callable[..., HTTPResponse]:
    """What `HTTPConnection.getresponse` makes its response with: an HTTPResponse that reads the
    socket through `_DeadlineReader`."""
    return functools.partial(_response_class(), timeout=timeout, deadline=deadline)


@functools.cache
def _response_class() -> Callable[..., HTTPResponse]:
    import http.client

    class DeadlineResponse(http.client.HTTPResponse):
        def __init__(
            self, sock: socket.socket, *args: Any, timeout: float, deadline: float, **kwargs: Any
        ) -> None:
            wrapped = _DeadlineSocket(sock, timeout, deadline)
            super().__init__(wrapped, *args, **kwargs)  # type: ignore[arg-type]

    return DeadlineResponse


def _read(resp: HTTPResponse, deadline: float, max_body: int) -> tuple[bytes, bool]:
    """(body, truncated) read under the cap and the deadline, decoded where it is gzip or deflate
    (the cap bounds the decoded bytes: a small bomb cannot fill memory).

    `read1` returns as soon as any bytes are there (`read(n)` waits for n bytes or the end: a
    body that trickles in a byte at a time, never idle for a whole read timeout, would hold it far
    past the deadline)."""
    encoding = (resp.getheader("Content-Encoding") or "").strip().lower()
    decoder = zlib.decompressobj(_DECODERS[encoding]) if encoding in _DECODERS else None
    buf = bytearray()
    while True:
        try:
            raw = resp.read1(CHUNK)
        except TimeoutError:
            if deadline - time.monotonic() < 0.05:  # the read was cut at the deadline
                raise BodyDeadline(bytes(buf)) from None
            raise  # a read timed out (idle for a whole `timeout`) before the deadline
        room = max_body + 1 - len(buf)
        try:
            if decoder is None:
                chunk = raw
            elif raw:
                chunk = decoder.decompress(raw, room)
            else:
                chunk = decoder.flush(room)
        except zlib.error as exc:
            raise BadEncoding(f"a {encoding} body that does not decode ({exc})") from exc
        buf.extend(chunk)
        if len(buf) >= max_body:  # cut on a character boundary: redact_bytes sees whole text
            return utf8_prefix(bytes(buf), max_body), True
        if not raw:
            if resp.length:  # the server closed before the Content-Length it announced
                import http.client

                raise http.client.IncompleteRead(bytes(buf), resp.length)
            return bytes(buf), False
        if time.monotonic() > deadline:
            raise BodyDeadline(bytes(buf))


class BadEncoding(Exception):
    """A body whose Content-Encoding says gzip or deflate, and is not."""


class Failure(str, Enum):
    """What kind of transport failure an exception of `get` was."""

    REFUSED = "connection refused"
    TIMEOUT = "timed out"
    UNREACHABLE = "unreachable"  # no route to the host, network down
    UNKNOWN_HOST = "unknown host"
    OTHER = "failed"


def classify(exc: BaseException) -> tuple[Failure, str]:
    """(kind, a one-line description) of an exception raised by `get`."""
    causes = _causes(exc)
    if any(isinstance(c, ConnectionRefusedError) for c in causes):
        return Failure.REFUSED, "connection refused"
    if any(isinstance(c, TimeoutError) for c in causes):
        return Failure.TIMEOUT, "timed out"
    if any(isinstance(c, socket.gaierror) for c in causes):
        return Failure.UNKNOWN_HOST, "unknown host"
    if any(isinstance(c, OSError) and getattr(c, "errno", None) in (101, 113) for c in causes):
        return Failure.UNREACHABLE, f"unreachable: {_describe(causes[-1])}"
    return Failure.OTHER, " ".join(_describe(c) for c in causes[:1])


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def _causes(exc: BaseException) -> list[BaseException]:
    """The exception, its causes/contexts, and exceptions stored in args or .reason."""
    seen: list[BaseException] = []
    todo: list[BaseException] = [exc]
    while todo and len(seen) < 20:
        cur = todo.pop()
        if any(cur is s for s in seen):
            continue
        seen.append(cur)
        nested = [cur.__cause__, cur.__context__, getattr(cur, "reason", None), *cur.args]
        todo.extend(x for x in nested if isinstance(x, BaseException))
    return seen

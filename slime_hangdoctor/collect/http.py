"""One bounded HTTP GET, as every probe of a dashboard, an engine or a router makes it.

urllib3 (the HTTP library under requests and Ray's own clients) directly: a connect timeout and a
read timeout, a wall-clock deadline for the whole body, a size cap, no redirects, no retries, a
fresh connection per request (a kept-alive connection the server dropped meanwhile would fail a
probe for nothing), and no proxy: the doctor talks to cluster-internal addresses directly, whatever
HTTP(S)_PROXY says (docs/probes.md). requests is not imported: it cost a cron `check` ~40 ms of
start-up for the same three calls.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from slime_hangdoctor.redact import utf8_prefix

if TYPE_CHECKING:
    from urllib3.response import BaseHTTPResponse

CHUNK = 64 * 1024


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


def get(
    url: str,
    headers: Mapping[str, str],
    *,
    timeout: float,
    deadline: float,
    max_body: int,
) -> Fetched:
    """GET `url`. `timeout` bounds connecting and each read; `deadline` (time.monotonic) the body.

    Raises the transport's exceptions (urllib3's, OSError) and BodyDeadline; the callers classify
    them into outcomes."""
    import urllib3

    limit = max(0.05, timeout)
    pool = urllib3.connection_from_url(
        url,
        maxsize=1,
        block=False,
        retries=False,
        timeout=urllib3.Timeout(connect=limit, read=limit),
    )
    try:
        resp = pool.urlopen(
            "GET",
            urllib3.util.parse_url(url).request_uri,
            headers=dict(headers),
            redirect=False,
            retries=False,
            preload_content=False,
            assert_same_host=False,
        )
        try:
            body, truncated = _read(resp, deadline, max_body)
        finally:
            resp.close()
        return Fetched(resp.status, body, resp.headers.get("Content-Type"), truncated)
    finally:
        pool.close()


def _read(resp: BaseHTTPResponse, deadline: float, max_body: int) -> tuple[bytes, bool]:
    """(body, truncated) read under the cap and the deadline.

    `read1` returns as soon as any bytes are there (`stream`/`read(n)` wait for n bytes or the end:
    a body that trickles in a byte at a time, never idle for a whole read timeout, would hold them
    far past the deadline)."""
    buf = bytearray()
    while True:
        chunk = resp.read1(CHUNK, decode_content=True)
        if not chunk:
            return bytes(buf), False
        buf.extend(chunk)
        if len(buf) >= max_body:  # cut on a character boundary: redact_bytes sees whole text
            return utf8_prefix(bytes(buf), max_body), True
        if time.monotonic() > deadline:
            raise BodyDeadline(bytes(buf))


class Failure(str, Enum):
    """What kind of transport failure an exception of `get` was."""

    REFUSED = "connection refused"
    TIMEOUT = "timed out"
    UNREACHABLE = "unreachable"  # no route to the host, network down
    UNKNOWN_HOST = "unknown host"
    OTHER = "failed"


_TIMEOUT_NAMES = frozenset({"ConnectTimeoutError", "ReadTimeoutError", "TimeoutError"})


def classify(exc: BaseException) -> tuple[Failure, str]:
    """(kind, a one-line description) of an exception raised by `get`."""
    causes = _causes(exc)
    if any(isinstance(c, ConnectionRefusedError) for c in causes):
        return Failure.REFUSED, "connection refused"
    if any(isinstance(c, TimeoutError) or type(c).__name__ in _TIMEOUT_NAMES for c in causes):
        return Failure.TIMEOUT, "timed out"
    if any(isinstance(c, OSError) and getattr(c, "errno", None) in (101, 113) for c in causes):
        return Failure.UNREACHABLE, f"unreachable: {_describe(causes[-1])}"
    text = " ".join(_describe(c) for c in causes[:1])
    if type(exc).__name__ == "NameResolutionError" or any(
        m in str(exc) for m in ("Name or service not known", "nodename nor servname")
    ):
        return Failure.UNKNOWN_HOST, "unknown host"
    return Failure.OTHER, text


def _describe(exc: BaseException) -> str:
    # urllib3 names its connection object first ("<...HTTPConnection object at 0x...>: Failed to ...")
    text = str(exc).strip().split(">: ", 1)[-1]
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def _causes(exc: BaseException) -> list[BaseException]:
    """The exception, its causes/contexts, and exceptions stored in args or .reason (urllib3)."""
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

"""Ask NCCL's RAS service on this node (TCP, 127.0.0.1:28028 by default) for its verbose status.

The client protocol (NCCL >= 2.24; JSON needs 2.28), as `shared/reproducers/nccl-broadcast-hang/
ras_gpm.py` speaks it against a real NCCL 2.28.9::

    -> CLIENT PROTOCOL 2      <- SERVER PROTOCOL 2
    -> TIMEOUT n              <- OK          (how long the local NCCL process waits for its peers)
    -> SET FORMAT json        <- OK          (JSON query only)
    -> VERBOSE STATUS         <- the report, until the server closes the connection

The query runs twice, text then JSON, each on its own connection, and the artefact is the JSON
`{"text": {"hello", "timeout", "elapsed_s", "body"}, "json": {"hello", "timeout", "format",
"elapsed_s", "body"}}` (an `"error"` key where a query broke), exactly as the H200 fixtures hold it.
Every receive has a socket timeout; the whole probe ends within `timeout` seconds.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from slime_hangdoctor.bundle import BundleWriter, ProbeClock, ProbeRecord
from slime_hangdoctor.collect.node_probe import NodeContext
from slime_hangdoctor.collect.options import CollectOptions
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.nccl_ras import NCCL_RAS

DEFAULT_PORT = CollectOptions.ras_port  # one default for the probe, the options and the CLI
_MAX_LINE = 64 * 1024
_MAX_BODY = 32 * 1024 * 1024
_GARBAGE_DRAIN_S = 0.5

# Status of one query, best first (the probe's outcome follows the best query).
OK, REFUSED, TIMEOUT, GARBAGE, ERROR = "ok", "refused", "timeout", "garbage", "error"


class _Broke(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def _decode(data: bytes) -> str:
    """Lossless for any bytes: valid UTF-8 stays as is, the rest becomes \\x.. escapes."""
    return data.decode("utf-8", "backslashreplace")


@dataclass
class _Conn:
    sock: socket.socket
    end: float  # time.monotonic() deadline of this query
    buf: bytes = b""
    received: list[bytes] = field(default_factory=list)  # every byte, for a garbage answer

    def _recv(self) -> bytes:
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline")
        self.sock.settimeout(left)
        chunk = self.sock.recv(65536)
        self.received.append(chunk)
        return chunk

    def command(self, line: str) -> str:
        self.sock.sendall((line + "\n").encode())
        return self.readline(line)

    def readline(self, after: str) -> str:
        while b"\n" not in self.buf:
            if len(self.buf) > _MAX_LINE:
                raise _Broke(GARBAGE, f"no line break in {len(self.buf)} bytes after {after!r}")
            try:
                chunk = self._recv()
            except TimeoutError as exc:
                if self.buf:
                    raise _Broke(GARBAGE, f"an unterminated answer to {after!r}") from exc
                raise _Broke(TIMEOUT, f"no answer to {after!r}") from exc
            if not chunk:
                if self.buf:
                    break
                raise _Broke(ERROR, f"the server closed the connection after {after!r}")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return _decode(line).strip()

    def read_to_eof(self) -> tuple[bytes, bool]:
        """Everything until the server closes; (bytes, complete)."""
        data = self.buf
        self.buf = b""
        while len(data) <= _MAX_BODY:
            try:
                chunk = self._recv()
            except TimeoutError:
                return data, False
            if not chunk:
                return data, True
            data += chunk
        return data, False

    def everything(self) -> bytes:
        """Every byte the server sent, after a short wait for more (a misbehaving server's answer)."""
        self.end = min(self.end, time.monotonic() + _GARBAGE_DRAIN_S)
        self.buf = b""  # already in self.received
        self.read_to_eof()
        return b"".join(self.received)


def ras_peer_timeout(budget_s: float) -> int:
    """The `TIMEOUT n` sent to RAS: what is left of the query's budget after a margin, 1..5 s."""
    return max(1, min(5, int(budget_s) - 1))


def ras_query(host: str, port: int, fmt: str, budget_s: float) -> tuple[dict[str, Any], str]:
    """One RAS conversation; returns its part of the artefact and its status (OK, REFUSED, ...)."""
    end = time.monotonic() + budget_s
    out: dict[str, Any] = {}
    try:
        sock = socket.create_connection((host, port), timeout=max(0.01, budget_s))
    except ConnectionRefusedError as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out, REFUSED
    except TimeoutError as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out, TIMEOUT
    except OSError as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out, ERROR
    conn = _Conn(sock, end)
    try:
        return _converse(conn, out, fmt, budget_s)
    except _Broke as exc:
        out["error"] = str(exc)
        if exc.status == GARBAGE:
            out["body"] = _decode(conn.everything())
        return out, exc.status
    except OSError as exc:  # reset, broken pipe
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out, ERROR
    finally:
        sock.close()


def _converse(
    conn: _Conn, out: dict[str, Any], fmt: str, budget_s: float
) -> tuple[dict[str, Any], str]:
    out["hello"] = conn.command("CLIENT PROTOCOL 2")
    if not out["hello"].startswith("SERVER PROTOCOL"):
        raise _Broke(GARBAGE, f"not a RAS server: it answered {out['hello'][:80]!r}")
    out["timeout"] = conn.command(f"TIMEOUT {ras_peer_timeout(budget_s)}")
    if out["timeout"] != "OK":
        raise _Broke(GARBAGE, f"RAS refused TIMEOUT: {out['timeout'][:80]!r}")
    if fmt == "json":
        out["format"] = conn.command("SET FORMAT json")
        if out["format"] != "OK":
            # NCCL < 2.28 has no JSON; say so without calling it garbage
            raise _Broke(ERROR, f"RAS refused SET FORMAT json: {out['format'][:80]!r}")
    conn.sock.sendall(b"VERBOSE STATUS\n")
    t0 = time.monotonic()
    body, complete = conn.read_to_eof()
    out["elapsed_s"] = round(time.monotonic() - t0, 2)
    out["body"] = _decode(body)
    if not complete:
        out["error"] = "the status report did not end before the deadline"
        return out, TIMEOUT
    return out, OK


def query_ras(
    writer: BundleWriter,
    *,
    node_ip: str | None,
    sample: int | None,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    timeout: float,
) -> ProbeRecord:
    """Query RAS in text then JSON form; the record's outcome is that of the better query.

    Connection refused -> unavailable (no NCCL communicator lives on this node); silence ->
    timed_out; an answer that is not the protocol -> failed, with the bytes kept.
    """
    probe = ProbeClock(NCCL_RAS, f"{host}:{port}", node_ip, sample)
    end = probe.t0 + max(timeout, 0.0)
    parts: dict[str, dict[str, Any]] = {}
    statuses: dict[str, str] = {}
    for i, fmt in enumerate(("text", "json")):
        left = end - time.monotonic()
        share = left / (2 - i)  # the text query gets half; the JSON query whatever is left
        parts[fmt], statuses[fmt] = ras_query(host, port, fmt, max(share, 0.0))
    outcome, reason = _verdict(statuses, parts, f"{host}:{port}", timeout)
    rec = probe.record(outcome, reason, port=port)
    return writer.add(rec, json.dumps(parts), suffix=".json")


def _verdict(
    statuses: dict[str, str], parts: dict[str, dict[str, Any]], where: str, timeout: float
) -> tuple[Outcome, str | None]:
    text, js = statuses["text"], statuses["json"]
    if OK in (text, js):
        bad = [f"{fmt}: {parts[fmt].get('error')}" for fmt, st in statuses.items() if st != OK]
        return Outcome.OK, "; ".join(bad) or None
    values = set(statuses.values())
    if GARBAGE in values:
        fmt = "text" if text == GARBAGE else "json"
        return Outcome.FAILED, (
            f"{where} does not speak the NCCL RAS protocol ({fmt}: {parts[fmt].get('error')})"
        )
    if values == {REFUSED}:
        return Outcome.UNAVAILABLE, "no NCCL communicator on this node (RAS port closed)"
    if TIMEOUT in values:
        return Outcome.TIMED_OUT, f"NCCL RAS at {where} did not answer within {timeout:g}s"
    errors = "; ".join(f"{fmt}: {parts[fmt].get('error')}" for fmt in statuses)
    return Outcome.FAILED, f"NCCL RAS at {where} failed: {errors}"


def NODE_PROBE(ctx: NodeContext) -> list[cf.Future[Any]]:  # noqa: N802 - the spec's entry point
    """NCCL RAS of this node (parsers.nccl_ras.SPEC)."""
    return [
        ctx.pool.submit(
            query_ras,
            ctx.writer,
            node_ip=ctx.spec.node_ip,
            sample=ctx.spec.sample,
            port=ctx.opts.ras_port,
            timeout=ctx.timeout(),
        )
    ]

"""The `sockets` artefact (collect/sockets.py) and the kernel's /proc/net/tcp{,6} tables -> facts. Pure.

Artefact format::

    {"node_ip": "10.0.0.1" | null, "time": 1700000000.0, "byteorder": "little" | "big",
     "tables": [{"name": "tcp" | "tcp6", "text": "<the kernel's table: header + rows>"}],
     "fds": {"<pid>": {"<fd>": <socket inode>}}}

A table keeps the kernel's header and those rows whose inode one of the listed processes holds, as
the kernel wrote them. Addresses are hex words in the byte order of the node that wrote them.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.parsers.json_text import load_json_object
from slime_hangdoctor.source_spec import SourceSpec

# the source's name (the `source` of its probe records, the folder under raw/): JSON: the TCP tables' rows of one node's slime processes, and their socket fds
SOCKETS = "sockets"

# The kernel's TCP states (include/net/tcp_states.h), as /proc/net/tcp writes them (hex).
TCP_STATES: Mapping[str, TcpState] = {
    "01": "ESTABLISHED",
    "02": "SYN_SENT",
    "03": "SYN_RECV",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "07": "CLOSE",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0A": "LISTEN",
    "0B": "CLOSING",
    "0C": "NEW_SYN_RECV",
}
LISTEN = "0A"
_FAMILIES = {"tcp": socket.AF_INET, "tcp6": socket.AF_INET6}


# --------------------------------------------------------------------------- facts


# the kernel's TCP state names (include/net/tcp_states.h), UNKNOWN for a number it adds
TcpState = Literal[
    "ESTABLISHED",
    "SYN_SENT",
    "SYN_RECV",
    "FIN_WAIT1",
    "FIN_WAIT2",
    "TIME_WAIT",
    "CLOSE",
    "CLOSE_WAIT",
    "LAST_ACK",
    "LISTEN",
    "CLOSING",
    "NEW_SYN_RECV",
    "UNKNOWN",
]


TCP_LISTEN: Final[TcpState] = "LISTEN"


TCP_ESTABLISHED: Final[TcpState] = "ESTABLISHED"


# a request in flight, or a connect that never completes
TCP_WAITING: Final[frozenset[TcpState]] = frozenset({"ESTABLISHED", "SYN_SENT"})


@dataclass(frozen=True)
class TcpSocket:
    """One row of the kernel's /proc/net/tcp or tcp6 table."""

    local_ip: str
    local_port: int
    remote_ip: str
    remote_port: int
    state: TcpState
    tx_queue: int  # bytes sent and not yet acknowledged by the peer
    rx_queue: int  # bytes received and not yet read by the process
    inode: int


@dataclass(frozen=True)
class TcpConnection:
    """A TCP socket held by one process (socket inode matched to one of its fds)."""

    pid: int
    fd: int
    socket: TcpSocket
    node_ip: str | None = None

    @property
    def remote(self) -> str:
        ip = self.socket.remote_ip
        return (
            f"[{ip}]:{self.socket.remote_port}" if ":" in ip else f"{ip}:{self.socket.remote_port}"
        )


def decode_address(text: str, family: int, byteorder: str = "little") -> tuple[str, int]:
    """``0100007F:1F90`` (the kernel's hex words, host byte order) -> ("127.0.0.1", 8080)."""
    try:
        ip_hex, port_hex = text.split(":")
        raw = bytes.fromhex(ip_hex)
        if len(raw) != (4 if family == socket.AF_INET else 16):
            raise ValueError("wrong address length")
        if byteorder == "little":
            raw = raw[::-1] if family == socket.AF_INET else _swap_words(raw)
        port = int(port_hex, 16)
        if not 0 <= port < 65536:
            raise ValueError("port out of range")
        return socket.inet_ntop(family, raw), port
    except (ValueError, OSError, struct.error) as exc:
        raise ParseError(f"bad socket address {text[:60]!r}: {exc}") from None


def _swap_words(raw: bytes) -> bytes:
    return struct.pack(">4I", *struct.unpack("<4I", raw))


def parse_tcp_table(
    text: str, name: str = "tcp", byteorder: str = "little"
) -> tuple[TcpSocket, ...]:
    """Every row of one /proc/net/tcp (`name` "tcp") or /proc/net/tcp6 ("tcp6") table."""
    family = _FAMILIES.get(name)
    if family is None:
        raise ParseError(f"unknown TCP table {name!r} (tcp or tcp6)")
    lines = text.splitlines()
    header = lines[0].split() if lines else []
    if header[:2] != ["sl", "local_address"] or "inode" not in header:
        raise ParseError(f"{name}: not a /proc/net/{name} table (no whole header)")
    out: list[TcpSocket] = []
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split()
        # the kernel writes at least 12 columns (up to the socket's refcount and address): fewer
        # is a cut row, whose inode column may be cut too
        if len(fields) < 12 or ":" not in fields[4]:
            raise ParseError(f"{name} line {n}: {len(fields)} fields, expected at least 12")
        try:
            tx, rx = (int(v, 16) for v in fields[4].split(":"))
            inode = int(fields[9])
        except ValueError:
            raise ParseError(f"{name} line {n}: bad queue or inode column") from None
        state = fields[3].upper()
        local_ip, local_port = decode_address(fields[1], family, byteorder)
        remote_ip, remote_port = decode_address(fields[2], family, byteorder)
        out.append(
            TcpSocket(
                local_ip=_unmapped(local_ip),
                local_port=local_port,
                remote_ip=_unmapped(remote_ip),
                remote_port=remote_port,
                state=TCP_STATES.get(state, "UNKNOWN"),
                tx_queue=tx,
                rx_queue=rx,
                inode=inode,
            )
        )
    return tuple(out)


def _unmapped(ip: str) -> str:
    """``::ffff:10.0.0.1`` (an IPv4 peer of a dual-stack socket) -> ``10.0.0.1``."""
    return ip[7:] if ip.startswith("::ffff:") and "." in ip else ip


def parse_sockets(data: str | bytes) -> tuple[TcpConnection, ...]:
    """The TCP connections of every process of one sockets artefact (LISTEN sockets left out)."""
    doc = _load(data)
    node_ip = doc.get("node_ip")
    if node_ip is not None and not isinstance(node_ip, str):
        raise ParseError("sockets: 'node_ip' is not a string")
    byteorder = doc.get("byteorder", "little")
    if byteorder not in ("little", "big"):
        raise ParseError(f"sockets: unknown byteorder {byteorder!r}")
    tables = doc.get("tables")
    if not isinstance(tables, list):
        raise ParseError("sockets: no 'tables' list")
    by_inode: dict[int, TcpSocket] = {}
    for i, table in enumerate(tables):
        if not isinstance(table, Mapping) or not isinstance(table.get("text"), str):
            raise ParseError(f"sockets: table {i} has no text")
        for s in parse_tcp_table(table["text"], str(table.get("name")), byteorder):
            if s.state != TCP_LISTEN and s.inode:
                by_inode[s.inode] = s
    out: list[TcpConnection] = []
    for pid, fd, inode in _fds(doc.get("fds")):
        found = by_inode.get(inode)
        if found is not None:
            out.append(TcpConnection(pid, fd, found, node_ip or None))
    return tuple(sorted(out, key=lambda c: (c.pid, c.fd)))


def _fds(value: Any) -> list[tuple[int, int, int]]:
    if not isinstance(value, Mapping):
        raise ParseError("sockets: 'fds' is not an object")
    out: list[tuple[int, int, int]] = []
    for pid_text, fds in value.items():
        if not isinstance(fds, Mapping):
            raise ParseError(f"sockets: fds of {pid_text!r} is not an object")
        for fd_text, inode in fds.items():
            try:
                pid, fd = int(pid_text), int(fd_text)
            except ValueError:
                raise ParseError(f"sockets: bad pid/fd {pid_text!r}/{fd_text!r}") from None
            if isinstance(inode, bool) or not isinstance(inode, int) or pid <= 0 or fd < 0:
                raise ParseError(f"sockets: bad socket inode for pid {pid_text} fd {fd_text}")
            out.append((pid, fd, inode))
    return out


def _load(data: str | bytes) -> Mapping[str, Any]:
    return load_json_object(data, "sockets", unit="artefact")


# The TCP connections of one node's slime processes at one sample (collect/sockets.py: 16 MiB a
# table, four tables).
SPEC = SourceSpec[tuple[TcpConnection, ...]](
    name=SOCKETS,
    parse=lambda data, rec: parse_sockets(data),
    max_bytes=64 * 1024 * 1024,
    partial=True,
    node_probe="slime_hangdoctor.collect.sockets",
    analysis="slime_hangdoctor.analysis.parts.sockets",
)

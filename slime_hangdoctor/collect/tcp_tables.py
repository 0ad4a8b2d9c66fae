"""The kernel's TCP tables of one sample, each read once: the process scan takes the listening
rows (`processes.listening_sockets`), the sockets probe the connections of the slime processes
(`sockets.scan_sockets`).

Reading `/proc/net/tcp` makes the kernel walk its whole established-connections hash table, empty
buckets included: ~13 ms of CPU for `tcp` and `tcp6` on a 2-core box with ~2000 sockets (most of
it in the kernel's `established_get_first`), paid twice per sample when both probes read it. The
tables of a network namespace are read once per sample, by whichever probe asks first (the process
scan), and kept for the other; the namespace is the one `/proc/<pid>/ns/net` names, so a process in
another namespace gets that namespace's own tables.
"""

from __future__ import annotations

import os
import socket
import threading

from slime_hangdoctor.parsers.sockets import LISTEN

NAMES = ("tcp", "tcp6")


class TcpTables:
    """`/proc/<pid>/net/{tcp,tcp6}` of one sample, read at most once per network namespace.

    `read` returns the table's bytes (all of them: a reader cuts what it keeps) or raises the
    OSError reading it raised (FileNotFoundError: no IPv6 on this node), the same on every call."""

    def __init__(self, procfs: str = "/proc") -> None:
        self.procfs = procfs
        self._lock = threading.Lock()
        self._tables: dict[tuple[str, str], bytes | OSError] = {}

    def read(self, name: str, pid: int | None = None) -> bytes:
        """Table `name` of process `pid`'s network namespace (None: ours, `/proc/net/<name>`)."""
        path = f"{self.procfs}/net/{name}" if pid is None else f"{self.procfs}/{pid}/net/{name}"
        try:
            netns = os.readlink(f"{self.procfs}/{'self' if pid is None else pid}/ns/net")
        except OSError:
            return _read(path)  # namespace unknown: not shared
        key = (netns, name)
        with self._lock:  # one reader per table: a second asker waits for the first's bytes
            found = self._tables.get(key)
            if found is None:
                try:
                    found = _read(path)
                except OSError as exc:
                    found = exc
                self._tables[key] = found
        if isinstance(found, OSError):
            raise found
        return found


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def listening_rows(tables: TcpTables) -> list[tuple[socket.AddressFamily, list[str]]] | None:
    """The address family and the kernel's columns (`sl local rem st ... uid timeout inode`) of
    every listening row of our namespace's `tcp` and `tcp6`; None where neither can be read (not
    Linux). One reader for the process scan's listening sockets and the GCS holder check."""
    rows: list[tuple[socket.AddressFamily, list[str]]] = []
    read = 0
    for name, family in zip(NAMES, (socket.AF_INET, socket.AF_INET6), strict=True):
        try:
            lines = tables.read(name).decode("ascii", "replace").splitlines()[1:]
        except OSError:
            continue
        read += 1
        rows.extend((family, f) for f in map(str.split, lines) if len(f) >= 10 and f[3] == LISTEN)
    return rows if read else None

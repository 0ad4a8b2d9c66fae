"""The TCP connections of this node's slime processes, from procfs (the `sockets` artefact).

For each process: its fds that are sockets (``/proc/<pid>/fd/N -> socket:[inode]``); then the
kernel's TCP tables (``/proc/<pid>/net/tcp`` and ``tcp6``, once per network namespace) keep the
rows whose inode one of those processes holds, verbatim: local and remote address, state, and the
send and receive queues (bytes not yet acknowledged / not yet read). psutil's `net_connections`
gives fds and addresses but not the queues, and re-reads both tables for every process.

Read-only, no signal or ptrace: directory listings, readlink and reads of procfs files. Bounded:
at most MAX_FDS fds per process, MAX_TABLE_BYTES per table, and a deadline checked between pids.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import os
import sys
import time
from collections.abc import Iterable
from typing import Any

from slime_hangdoctor.bundle import BundleWriter, ProbeClock, ProbeRecord, dumps_json
from slime_hangdoctor.collect.node_probe import NodeContext
from slime_hangdoctor.collect.tcp_tables import TcpTables
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.sockets import LISTEN, SOCKETS

MAX_FDS = 20_000  # per process
MAX_TABLE_BYTES = 16 << 20  # per /proc/net/tcp* table (a node with ~100k sockets)


def scan_sockets(
    pids: Iterable[int],
    node_ip: str | None,
    deadline: float,
    procfs: str = "/proc",
    tables: TcpTables | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The artefact, and what could not be read (one line each). `tables`: the sample's TCP
    tables (`tcp_tables`), which the process scan has read already."""
    reads = tables or TcpTables(procfs)
    problems: list[str] = []
    fds: dict[str, dict[str, int]] = {}
    netns: dict[str, int] = {}  # network namespace -> one pid in it
    for pid in sorted(set(pids)):
        if time.monotonic() > deadline:
            problems.append("deadline reached: later processes not read")
            break
        found, why = _socket_fds(pid, procfs)
        if why is not None:
            problems.append(f"pid {pid}: {why}")
        if found:
            fds[str(pid)] = found
            try:
                netns.setdefault(os.readlink(f"{procfs}/{pid}/ns/net"), pid)
            except OSError:
                netns.setdefault("?", pid)
    wanted = {inode for found in fds.values() for inode in found.values()}
    kept: list[dict[str, str]] = []
    for pid in netns.values():
        for name in ("tcp", "tcp6"):
            text, why = _table(reads, name, pid, wanted)
            if why is not None:
                problems.append(f"{name} of pid {pid}'s network namespace: {why}")
            if text is not None:
                kept.append({"name": name, "text": text})
    doc = {
        "node_ip": node_ip,
        "time": time.time(),
        "byteorder": sys.byteorder,
        "tables": kept,
        "fds": fds,
    }
    return doc, problems


def record_sockets(
    writer: BundleWriter,
    pids: Iterable[int],
    *,
    node_ip: str | None,
    sample: int | None,
    timeout: float,
    tables: TcpTables | None = None,
) -> ProbeRecord:
    """Scan and store (source `sockets`); never raises. Unreadable processes are named in `reason`."""
    clock = ProbeClock(SOCKETS, "sockets", node_ip=node_ip, sample=sample)
    record = clock.record

    try:
        doc, problems = scan_sockets(pids, node_ip, clock.t0 + timeout, tables=tables)
    except Exception as exc:  # noqa: BLE001 - a collector never raises past itself
        return writer.add(record(Outcome.FAILED, f"socket scan failed: {exc!r}"[:300]))
    if not doc["tables"] and not doc["fds"] and problems:
        return writer.add(record(Outcome.DENIED, "; ".join(problems[:4])[:400]))
    reason = "; ".join(problems[:4])[:400] or None
    count = sum(len(v) for v in doc["fds"].values())
    return writer.add(record(Outcome.OK, reason, sockets=count), dumps_json(doc), suffix=".json")


def _socket_fds(pid: int, procfs: str) -> tuple[dict[str, int], str | None]:
    fd_dir = f"{procfs}/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except FileNotFoundError:
        return {}, None  # gone meanwhile
    except OSError as exc:
        return {}, f"fds not readable ({exc.strerror or exc})"
    out: dict[str, int] = {}
    for name in names[:MAX_FDS]:
        try:
            target = os.readlink(f"{fd_dir}/{name}")
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]"):
            try:
                out[name] = int(target[8:-1])
            except ValueError:
                continue
    why = f"more than {MAX_FDS} fds: the rest not read" if len(names) > MAX_FDS else None
    return out, why


def _table(
    tables: TcpTables, name: str, pid: int, wanted: set[int]
) -> tuple[str | None, str | None]:
    """The header and the non-listening rows of `wanted` inodes of one table."""
    try:
        raw = tables.read(name, pid)[: MAX_TABLE_BYTES + 1]
    except FileNotFoundError:
        return None, None  # no IPv6 on this node
    except OSError as exc:
        return None, f"not readable ({exc.strerror or exc})"
    why = None
    if len(raw) > MAX_TABLE_BYTES:
        raw = raw[: raw.rfind(b"\n", 0, MAX_TABLE_BYTES) + 1]
        why = f"larger than {MAX_TABLE_BYTES >> 20} MiB: the rest not read"
    lines = raw.decode("ascii", "replace").splitlines()
    if not lines:
        return None, "empty"
    kept = [lines[0]]
    for line in lines[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] == LISTEN:
            continue
        try:
            if int(fields[9]) in wanted:
                kept.append(line)
        except ValueError:
            continue
    return "\n".join(kept) + "\n", why


def NODE_PROBE(ctx: NodeContext) -> list[cf.Future[Any]]:  # noqa: N802 - the spec's entry point
    """The TCP connections of this node's slime processes (parsers.sockets.SPEC)."""
    return ctx.submit_over_members(functools.partial(record_sockets, tables=ctx.tcp_tables))

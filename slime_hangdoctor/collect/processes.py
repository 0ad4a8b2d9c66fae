"""The slime-relevant processes of this node, as psutil sees them (the `processes` artefact).

Which processes are kept:

- Ray workers whose title (argv[0]) starts with ``ray::``: actors show ``ray::Class`` when idle and
  ``ray::Class.method`` while a method runs. Ray's own daemons are left out: ``ray::DashboardAgent``,
  ``ray::RuntimeEnvAgent`` and idle pooled workers (``ray::IDLE*``); they play no part in a slime job.
  ``ray::JobSupervisor`` is kept: the job's driver (``python train.py``) is its child.
- every process whose title starts with ``sglang::`` (schedulers, detokenizer), wherever it hangs,
  and, found so by title, its untitled parent: the engine's HTTP process (an engine outside Ray);
- the pids in `extra_pids` (Ray job drivers from the Job API);
- the children and grandchildren (3 levels) of all of the above: the SGLang HTTP server that an
  `SGLangEngine` actor spawns (``python -c from multiprocessing.spawn ...``), its schedulers, the
  router that RolloutManager forks, the driver under JobSupervisor.

Found by their titles (`--local`, or no Ray state), only the processes of one user are taken: the
`--uid` given, else the owner of the local Ray session (`$RAY_TMPDIR/ray/session_latest`, /tmp by
default) if the Ray temp dir can be trusted to say it (`local_uid_choice`), else the user running the
doctor. A root doctor thus never picks up another user's `ray::`/`sglang::` processes (anyone can
title a process so, or plant a `session_latest` in Ray's 0777 temp dir), nor dumps their stacks.

Only the diagnosed Ray cluster's: a process found by its title (or a pending actor's pid) whose
raylet is another cluster's on the same machine is left out (collect/cluster_scope.py says how a
process's cluster is told; the artefact lists those pids under `other_cluster`).

Raylet, GCS, dashboard and other daemons are not listed. A process that vanishes mid-scan is skipped.
Command lines are redacted; the environment keeps allow-listed keys only; trailing empty arguments
(Ray pads its titles with hundreds of them) are dropped.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from slime_hangdoctor.bundle import BundleWriter, ProbeClock, ProbeRecord, dumps_json
from slime_hangdoctor.collect.cluster_scope import (
    ClusterScope,
    Raylet,
    belongs,
    raylet_pid,
    read_raylet,
)
from slime_hangdoctor.collect.tcp_tables import TcpTables, listening_rows
from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.outcome import Outcome
from slime_hangdoctor.parsers.processes import PROCESSES, PROXY_ENV
from slime_hangdoctor.parsers.sockets import decode_address
from slime_hangdoctor.redact import filter_env, redact_cmdline
from slime_hangdoctor.safe_fs import dir_problem, trusted_owners

RAY_DAEMON_PREFIXES = ("ray::DashboardAgent", "ray::RuntimeEnvAgent", "ray::IDLE")
DESCENDANT_DEPTH = 3


def is_root_title(title: str) -> bool:
    """Is a process with this argv[0] slime-relevant by itself (without a relevant parent)?"""
    if title.startswith("sglang::"):
        return True
    return title.startswith("ray::") and not title.startswith(RAY_DAEMON_PREFIXES)


def ray_session_uid() -> int | None:
    """The uid owning this machine's latest Ray session directory, None without one."""
    base = Path(os.environ.get("RAY_TMPDIR") or "/tmp") / "ray" / "session_latest"
    try:
        return base.stat().st_uid
    except OSError:
        return None


def local_uid_choice(explicit: int | None = None) -> tuple[int, str | None]:
    """(whose processes title discovery takes, why the Ray session's owner was not taken or None).

    `--uid`, else the owner of the Ray session if the Ray temp dir can be trusted to say it (no
    directory on its path writable by others without a sticky bit, each root's or ours: Ray makes
    its own 0777, where anyone can plant a `session_latest` of theirs), else ours."""
    if explicit is not None:
        return explicit, None
    own = os.geteuid()
    session = ray_session_uid()
    if session is None or session == own:
        return own, None
    temp_dir = Path(os.environ.get("RAY_TMPDIR") or "/tmp") / "ray"
    why = dir_problem(temp_dir, trusted_owners())
    if why is None:
        return session, None
    return own, (
        f"the owner of {temp_dir / 'session_latest'} (uid {session}) was not taken as the job's "
        f"user: {why}; only uid {own}'s processes were scanned (pass --uid to name the job's user)"
    )


def local_uid(explicit: int | None = None) -> int:
    """Whose processes title discovery takes: `--uid`, else the Ray session's owner (when it can
    be trusted, `local_uid_choice`), else ours."""
    return local_uid_choice(explicit)[0]


def scan_processes(
    node_ip: str | None,
    *,
    extra_pids: AbstractSet[int] = frozenset(),
    roots: AbstractSet[int] | None = None,
    uid: int | None = None,
    pending: AbstractSet[tuple[int, str]] = frozenset(),
    tables: TcpTables | None = None,
    cluster: ClusterScope | None = None,
) -> dict[str, Any]:
    """The JSON-able processes artefact of this node (see the module doc for who is in it).

    `roots`: when Ray says which worker pids belong to this node, scan exactly those (and their
    descendants) instead of every `ray::`/`sglang::` title: several Ray nodes can share one machine.
    `uid`: with title discovery, only that user's processes (and their descendants of that user).
    `pending`: (pid, class) of actors Ray has not placed on a node yet (in their constructor): a
    root when that pid here carries the title `ray::<class>...` (another node's pid is not one).
    `tables`: the sample's TCP tables, read once for this scan and the sockets probe.
    `cluster`: the Ray cluster diagnosed: a process found by its title, or a pending actor's pid,
    whose raylet is another cluster's is left out (collect/cluster_scope.py); the artefact lists
    their pids under `other_cluster`.
    """
    import psutil

    table = _process_table(psutil, titles=roots is None, uid=uid)
    foreign: set[int] = set()
    if roots is None:
        chosen_roots = {pid for pid, (_, title) in table.items() if is_root_title(title)}
        foreign = _other_cluster(psutil, chosen_roots, table, cluster)
        chosen_roots -= foreign
        chosen_roots |= _sglang_servers(chosen_roots, table)
    else:
        chosen_roots = {pid for pid in roots if pid in table}
    roots = chosen_roots | {pid for pid in extra_pids if pid in table}
    titled = {pid for pid, cls in pending if pid in table and _titled_as(psutil, pid, cls)}
    foreign |= _other_cluster(psutil, titled, table, cluster)
    roots |= titled - foreign
    roots.discard(os.getpid())
    chosen = _with_descendants(roots, table)
    listening = listening_sockets(tables=tables)
    rows = [row for pid in sorted(chosen) if (row := _describe(psutil, pid, listening)) is not None]
    doc: dict[str, Any] = {"node_ip": node_ip, "time": time.time(), "processes": rows}
    if uid is not None:
        doc["uid"] = uid
    if foreign:
        doc["other_cluster"] = sorted(foreign)
    return doc


def _other_cluster(
    psutil: Any,
    pids: AbstractSet[int],
    table: dict[int, tuple[int | None, str]],
    cluster: ClusterScope | None,
) -> set[int]:
    """The pids among `pids` whose raylet is another cluster's than `cluster` (none where the
    scope is unknown, or a process's raylet cannot be found or read)."""
    if cluster is None or not cluster.known or not pids:
        return set()
    raylets: dict[int, Raylet | None] = {}
    out: set[int] = set()
    for pid in pids:
        try:
            environ = psutil.Process(pid).environ()
        except (psutil.Error, OSError):
            environ = None
        at = raylet_pid(pid, environ, table)
        if at is None:
            continue
        if at not in raylets:
            raylets[at] = read_raylet(at)
        raylet = raylets[at]
        if raylet is not None and not belongs(raylet, cluster):
            out.add(pid)
    if not cluster.strict and not any(r and belongs(r, cluster) for r in raylets.values()):
        return set()  # a guessed scope that no raylet here answers for: not applied
    return out


def record_processes(
    writer: BundleWriter,
    *,
    node_ip: str | None,
    sample: int | None,
    extra_pids: AbstractSet[int] = frozenset(),
    roots: AbstractSet[int] | None = None,
    uid: int | None = None,
    note: str | None = None,
    pending: AbstractSet[tuple[int, str]] = frozenset(),
    tables: TcpTables | None = None,
    cluster: ClusterScope | None = None,
) -> ProbeRecord:
    """Scan this node and store the artefact (source `processes`); never raises. `note`: what
    the scan left out and why (a partial blind spot)."""
    clock = ProbeClock(PROCESSES, "processes", node_ip=node_ip, sample=sample)
    record = clock.record

    try:
        doc = scan_processes(
            node_ip,
            extra_pids=extra_pids,
            roots=roots,
            uid=uid,
            pending=pending,
            tables=tables,
            cluster=cluster,
        )
    except ImportError:
        return writer.add(
            record(Outcome.UNAVAILABLE, "psutil is not installed (pip install psutil)")
        )
    except Exception as exc:  # a collector never raises past itself
        return writer.add(record(Outcome.FAILED, f"process scan failed: {exc!r}"[:300]))
    meta: dict[str, Any] = {"count": len(doc["processes"])}
    if uid is not None:
        meta["uid"] = uid  # title discovery was limited to this user's processes
    if doc.get("other_cluster"):  # left out: their raylet is another Ray cluster's
        meta["other_cluster"] = len(doc["other_cluster"])
    return writer.add(record(Outcome.OK, note, **meta), dumps_json(doc), suffix=".json")


# --------------------------------------------------------------------------- helpers


def _sglang_servers(roots: AbstractSet[int], table: dict[int, tuple[int | None, str]]) -> set[int]:
    """The HTTP process of an SGLang engine found by its children's titles: the untitled parent of
    an `sglang::` process (an engine outside Ray, `python -m sglang.launch_server`, has no title of
    its own; under Ray it is a descendant of the SGLangEngine actor anyway)."""
    out: set[int] = set()
    for pid in roots:
        ppid, title = table[pid]
        if not title.startswith("sglang::") or ppid is None or ppid <= 1 or ppid not in table:
            continue
        if not table[ppid][1].startswith(("sglang::", "ray::")):
            out.add(ppid)
    return out


def _process_table(
    psutil: Any, *, titles: bool = True, uid: int | None = None
) -> dict[int, tuple[int | None, str]]:
    """pid -> (ppid, argv[0] or name) of every process we may see (of user `uid` only, if given).

    `titles=False` (the roots are known): ppids only, title "" (one /proc read per process instead
    of three; a training node runs hundreds of processes, and a cron check scans twice a run)."""
    table: dict[int, tuple[int | None, str]] = {}
    if not titles:
        for proc in psutil.process_iter(["pid", "ppid"]):
            table[int(proc.info["pid"])] = (proc.info.get("ppid"), "")
        return table
    attrs = ["pid", "ppid", "name", "cmdline"] + (["uids"] if uid is not None else [])
    for proc in psutil.process_iter(attrs):
        info = proc.info
        if uid is not None and (info.get("uids") is None or info["uids"].real != uid):
            continue
        cmd = info.get("cmdline") or []
        title = cmd[0] if cmd and cmd[0] else (info.get("name") or "")
        table[int(info["pid"])] = (info.get("ppid"), str(title))
    return table


def _titled_as(psutil: Any, pid: int, class_name: str) -> bool:
    """Whether process `pid` carries the `ray::` title of actor class `class_name` (a named actor's
    constructor included: `ray::<name>:Class.__init__`, topology.parse_ray_title)."""
    from slime_hangdoctor.topology import parse_ray_title

    try:
        argv = psutil.Process(pid).cmdline()
    except (psutil.Error, OSError):
        return False
    parsed = parse_ray_title(argv[0] if argv else "")
    return parsed is not None and parsed[0] == class_name


def _with_descendants(roots: set[int], table: dict[int, tuple[int | None, str]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        if ppid is not None:
            children.setdefault(ppid, []).append(pid)
    chosen = set(roots)
    level = set(roots)
    for _ in range(DESCENDANT_DEPTH):
        level = {c for p in level for c in children.get(p, ())} - chosen
        chosen |= level
    return chosen


def _describe(
    psutil: Any, pid: int, listening: dict[int, tuple[str, int]] | None = None
) -> dict[str, Any] | None:
    """One process as a dict; None when it vanished meanwhile.

    `listening`: the node's listening sockets by inode (`listening_sockets`); None = ask psutil."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            row: dict[str, Any] = {
                "pid": pid,
                "ppid": _field(psutil, proc.ppid),
                "name": _field(psutil, proc.name) or "",
                "cmdline": _cmdline(psutil, proc),
                "status": _field(psutil, proc.status) or "unknown",
                "cpu_seconds": _cpu_seconds(psutil, proc),
                "create_time": _field(psutil, proc.create_time),
                "num_threads": _field(psutil, proc.num_threads),
            }
        if listening is None:
            ports, addrs = _listening(psutil, proc)
        else:
            ports, addrs = _listening_from(psutil, pid, listening)
        row["listen_ports"] = ports
        row["listen_addrs"] = addrs
        row["env"] = _env(psutil, proc)
    except psutil.ZombieProcess:
        return _zombie(psutil, pid)
    except psutil.NoSuchProcess:
        return None
    return row


def _zombie(psutil: Any, pid: int) -> dict[str, Any] | None:
    """A zombie (killed, not yet reaped by its parent) as far as the kernel still tells: its parent,
    its `comm` name, its start time (all from /proc/<pid>/stat); no command line, environment or
    socket is left. The parent is what says whose child died (slime's router, forked by the
    RolloutManager, stays its zombie after a SIGKILL until multiprocessing reaps it). None when it
    was reaped meanwhile."""
    row: dict[str, Any] = {"pid": pid, "ppid": None, "name": "", "cmdline": [], "status": "zombie"}
    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None
    for key, getter in (
        ("ppid", proc.ppid),
        ("name", proc.name),
        ("create_time", proc.create_time),
    ):
        try:
            value = getter()
        except psutil.ZombieProcess:
            continue  # a field psutil will not read of a zombie
        except psutil.NoSuchProcess:
            return None
        except psutil.Error:
            continue
        if value is not None:
            row[key] = value
    return row


def _field(psutil: Any, getter: Any) -> Any:
    try:
        return getter()
    except psutil.AccessDenied:
        return None


def _cmdline(psutil: Any, proc: Any) -> list[str]:
    argv = list(_field(psutil, proc.cmdline) or [])
    while argv and not argv[-1]:
        argv.pop()
    return list(redact_cmdline(argv))


def _cpu_seconds(psutil: Any, proc: Any) -> float | None:
    times = _field(psutil, proc.cpu_times)
    return None if times is None else round(float(times.user) + float(times.system), 3)


def _listening(psutil: Any, proc: Any) -> tuple[list[int], list[str]]:
    getter = getattr(proc, "net_connections", None) or proc.connections
    try:
        conns = getter(kind="tcp")
    except psutil.AccessDenied:
        return [], []
    ports: set[int] = set()
    addrs: set[str] = set()
    for conn in conns:
        if conn.status != psutil.CONN_LISTEN or not conn.laddr:
            continue
        ip, port = conn.laddr[0], int(conn.laddr[1])
        ports.add(port)
        addrs.add(f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}")
    return sorted(ports), sorted(addrs)


def listening_sockets(
    procfs: str = "/proc", tables: TcpTables | None = None
) -> dict[int, tuple[str, int]] | None:
    """Socket inode -> (ip, port) of every listening TCP socket, read once per scan from
    ``/proc/net/tcp`` and ``tcp6`` (`tables`: the sample's, shared with the sockets probe); None
    where there are no such tables (not Linux).

    psutil's ``Process.net_connections`` re-reads and decodes both whole tables for every process
    it is asked about: on a node with many processes and sockets that was most of a scan's time.
    Each process's sockets are then matched by inode (`_listening_from`), as psutil does."""
    rows = listening_rows(tables or TcpTables(procfs))
    if rows is None:
        return None
    found: dict[int, tuple[str, int]] = {}
    for family, fields in rows:
        try:
            found[int(fields[9])] = decode_address(fields[1], family, sys.byteorder)
        except (ValueError, ParseError):
            continue
    return found


def _listening_from(
    psutil: Any, pid: int, listening: dict[int, tuple[str, int]], procfs: str = "/proc"
) -> tuple[list[int], list[str]]:
    """The listening ports and addresses of `pid`: its socket fds matched against `listening`."""
    fd_dir = f"{procfs}/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except FileNotFoundError:
        raise psutil.NoSuchProcess(pid) from None
    except OSError:  # not ours to read (psutil: AccessDenied)
        return [], []
    ports: set[int] = set()
    addrs: set[str] = set()
    for name in names:
        try:
            target = os.readlink(f"{fd_dir}/{name}")
        except OSError:
            continue
        if not target.startswith("socket:["):
            continue
        try:
            found = listening.get(int(target[8:-1]))
        except ValueError:
            continue
        if found is None:
            continue
        ip, port = found
        ports.add(port)
        addrs.add(f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}")
    return sorted(ports), sorted(addrs)


def _env(psutil: Any, proc: Any) -> dict[str, str]:
    try:
        return filter_env(proc.environ(), PROXY_ENV)
    except (psutil.AccessDenied, OSError):
        return {}

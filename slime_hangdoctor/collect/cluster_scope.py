"""Which Ray cluster a local process belongs to, so that the process scan keeps only the job's.

Several Ray clusters can run on one machine (two `ray start --head` with other ports and temp
dirs, a test cluster beside the training one): their workers all carry `ray::` titles and their
engines `sglang::` ones. A process belongs to the cluster of its **raylet**: Ray starts every
worker as the raylet's child and puts the raylet's pid in its environment (`RAY_RAYLET_PID`,
inherited by whatever the worker starts: an SGLang server and its schedulers); the raylet's
command line names its cluster: `--node_id=`, `--session_dir=`, `--gcs-address=`
(ray/_private/services.py start_raylet). So a process's raylet is its `RAY_RAYLET_PID`, else its
nearest ancestor whose argv[0] is Ray's `raylet` binary.

The cluster being diagnosed (`ClusterScope`) is what the run knows of it, best first: this node's
Ray node id (Ray's state), the session name of the dashboard that answered, the GCS address
(found, or given as `host:port`), else the local session (`session_latest` in the Ray temp dir,
where that dir can be trusted to say it). A process whose raylet answers for another cluster is
left out; one without a raylet (an engine started outside Ray, a worker whose raylet is gone)
cannot be placed and is kept, as before.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

RAYLET_BINARY = "raylet"  # argv[0]'s last component: ray/core/src/ray/raylet/raylet
RAYLET_PID_ENV = "RAY_RAYLET_PID"  # set by the raylet for each worker it starts (worker_pool.cc)
ANCESTOR_DEPTH = 8  # a worker's descendants: SGLang server, scheduler, their helpers


@dataclass(frozen=True)
class ClusterScope:
    """The Ray cluster a run diagnoses, as far as the run knows it (plain data: it travels in a
    NodeSpec). A field left None is not known."""

    node_id: str | None = None  # this node's Ray node id, from the cluster's state
    session_name: str | None = None  # `session_<time>_<pid>`: the dashboard's /api/version
    gcs_address: str | None = None  # "host:port"
    why: str = ""  # where it came from, for the scan's note
    # the cluster has no raylet on this machine (an address of this machine where nothing
    # answered): every process a raylet here started is another cluster's
    elsewhere: bool = False
    # A scope the run knows (the cluster it connected to, an address given) holds even where no
    # raylet here is that cluster's; one it only guessed (the local `session_latest`, a file in
    # a directory every user may write) is applied only where a raylet here answers for it.
    strict: bool = True

    @property
    def known(self) -> bool:
        return self.elsewhere or any((self.node_id, self.session_name, self.gcs_address))


@dataclass(frozen=True)
class Raylet:
    """What a raylet's command line says of its cluster."""

    pid: int
    node_id: str | None
    session_name: str | None
    gcs_address: str | None


def parse_raylet_argv(pid: int, argv: Sequence[str]) -> Raylet | None:
    """A raylet's identity from its argv; None when argv[0] is not Ray's raylet binary. Pure."""
    if not argv or os.path.basename(argv[0]) != RAYLET_BINARY:
        return None
    flags: dict[str, str] = {}
    for arg in argv[1:]:
        if arg.startswith("--") and "=" in arg:
            key, _, value = arg[2:].partition("=")
            flags.setdefault(key.replace("-", "_"), value)  # the raylet's own flags come first
    session_dir = flags.get("session_dir") or ""
    return Raylet(
        pid,
        flags.get("node_id") or None,
        os.path.basename(session_dir.rstrip("/")) or flags.get("session_name") or None,
        flags.get("gcs_address") or None,
    )


def belongs(raylet: Raylet, scope: ClusterScope) -> bool:
    """Is this raylet the diagnosed cluster's? Decided by the best field both know."""
    if scope.elsewhere:
        return False
    if scope.node_id and raylet.node_id:
        return raylet.node_id == scope.node_id
    if scope.session_name and raylet.session_name:
        return raylet.session_name == scope.session_name
    if scope.gcs_address and raylet.gcs_address:
        return same_gcs(raylet.gcs_address, scope.gcs_address)
    return True  # nothing to tell them apart by


def same_gcs(a: str, b: str) -> bool:
    """Two `host:port` GCS addresses of one GCS: the same port and host, a loopback or any
    address of this machine standing for this machine."""
    (host_a, port_a), (host_b, port_b) = _split(a), _split(b)
    if port_a is None or port_a != port_b:
        return False
    return host_a == host_b or (_is_here(host_a) and _is_here(host_b))


def raylet_pid(
    pid: int, environ: Mapping[str, str] | None, table: Mapping[int, tuple[int | None, str]]
) -> int | None:
    """The pid of `pid`'s raylet: its RAY_RAYLET_PID, else its nearest ancestor in `table`
    (pid -> (ppid, argv[0])) that is a raylet; None when neither says."""
    value = (environ or {}).get(RAYLET_PID_ENV, "")
    if value.isdigit():
        return int(value)
    at: int | None = pid
    for _ in range(ANCESTOR_DEPTH):
        entry = table.get(at) if at is not None else None
        if entry is None:
            return None
        if os.path.basename(entry[1]) == RAYLET_BINARY:
            return at
        at = entry[0]
    return None


def read_raylet(pid: int, procfs: str = "/proc") -> Raylet | None:
    """The raylet `pid` as its command line says (one read of at most 64 KiB); None when it is
    gone, not readable, or not a raylet (a pid a worker's environment names may be reused)."""
    try:
        with open(f"{procfs}/{pid}/cmdline", "rb") as fh:
            raw = fh.read(65536)
    except OSError:
        return None
    argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0")]
    return parse_raylet_argv(pid, argv)


def ray_temp_dir() -> Path:
    """Ray's temp dir, as Ray finds it: $RAY_TMPDIR/ray, else $TMPDIR/ray, else /tmp/ray."""
    base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return Path(base) / "ray"


def session_scope(temp_dir: Path, owners: frozenset[int]) -> ClusterScope:
    """The local session `session_latest` names, where its session directory is one of `owners`'
    (else an unknown scope). A guess, not strict (`ClusterScope.strict`): Ray makes its temp dir
    0777, so anyone may point `session_latest` elsewhere; a session of no raylet here is then not
    applied, and another user's session is never taken."""
    link = temp_dir / "session_latest"
    try:
        target = os.readlink(link)
        owner = os.stat(link).st_uid  # the session directory it names
    except OSError:
        return ClusterScope()
    name = os.path.basename(target.rstrip("/"))
    if not name.startswith("session_") or owner not in owners:
        return ClusterScope()
    return ClusterScope(session_name=name, why=f"the local session {link}", strict=False)


def _split(address: str) -> tuple[str, int | None]:
    host, sep, port = address.rpartition(":")
    if not sep:
        return address, None
    host = host.strip("[]")
    return host, int(port) if port.isdigit() else None


def _is_here(host: str) -> bool:
    if host in ("localhost", "::1", "0.0.0.0", "::") or host.startswith("127."):
        return True
    return is_local_address(host)


def is_local_address(host: str) -> bool:
    """Is `host` an address of this machine? (binding to it only works if it is)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
    except OSError:
        return False
    return True


def address_scope(address: str | None) -> ClusterScope:
    """The cluster an address the user gave names, when no Ray answered there: a GCS
    `host:port` by its GCS address; a dashboard URL of this machine (nothing answered at it) is
    no cluster here; anything else (None, "auto", another host's dashboard) an unknown scope."""
    address = (address or "").strip()
    if not address or address in ("auto", "local"):
        return ClusterScope()
    if "://" not in address:
        gcs = address if _split(address)[1] is not None else f"{address}:6379"
        return ClusterScope(gcs_address=gcs, why=f"the GCS address {address}")
    from urllib.parse import urlsplit

    host = urlsplit(address).hostname or ""
    if host and _is_here(host):
        return ClusterScope(why=f"{address}: no Ray cluster answered there", elsewhere=True)
    return ClusterScope()

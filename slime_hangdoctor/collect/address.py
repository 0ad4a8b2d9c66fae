"""Find a Ray cluster's dashboard from whatever address a user gives, fast, never hanging.

Address forms:

- ``None`` / ``"auto"``: ``RAY_API_SERVER_ADDRESS``, then ``RAY_ADDRESS`` (each in any form below),
  then the local cluster (``<ray temp dir>/ray_current_cluster``, then the GCS port file in
  ``<ray temp dir>/session_latest``), then ``http://127.0.0.1:8265``. The Ray temp dir is found as
  Ray finds it: ``$RAY_TMPDIR/ray``, else ``$TMPDIR/ray``, else ``/tmp/ray``.
- ``"host:port"`` (GCS): the dashboard address is read from the GCS internal KV (key ``dashboard``,
  namespace ``dashboard``) with one gRPC call under a deadline (`gcs_kv`: without importing Ray);
  then ``http://host:port`` (a dashboard given without its scheme), then ``http://host:8265``.
- ``"http(s)://host:port"``: the dashboard itself. ``"ray://host:port"`` (Ray Client): host:8265.

**All at once, in order.** Every candidate is asked at the same time (each GCS, each dashboard's
``GET /api/version``, each in a daemon thread under the search's deadline), and the answer is the
first candidate *in the order above* that answered as a Ray dashboard, once every candidate before
it has failed. So the result is the one a one-by-one search would give (a GCS's own dashboard
beats a dashboard on port 8265 of the same host, which may be another cluster's), and its time is
the slowest of the chain, not the sum. A candidate that a GCS names starts as soon as the GCS
answers; the dashboard given as ``host:port`` is asked only once the GCS there has failed (a GCS
port is not sent an HTTP request when it answers as a GCS).

**Where the Ray token goes** (docs/reliability.md, TM3 and TM16). The token is sent only to an
address the user gave (the argument, ``RAY_ADDRESS``, ``RAY_API_SERVER_ADDRESS``), to one read from
a trusted local file, and to the dashboard that such a GCS names. A *guessed* address (port 8265 of
the host given, the Ray Client's host, ``http://127.0.0.1:8265`` with no address at all) is asked
without it: a dashboard there that answers without a token is used without one (the cluster has no
token auth); one that wants the token is reported (give its URL) and never sent it. Anyone may
listen on a port that the dashboard does not hold.

The local cluster's files are trusted only as safe_fs says: the file belongs to root, to the
doctor's user or to the ``--uid`` given, and no directory on its path may be written by anyone
else (sticky ones excepted). Ray makes its temp dir and session dirs mode 0777 without a sticky
bit, so any local user can plant these files there. An address read from a file not trusted so is
never sent the Ray token: with a token, it is not tried at all (a blind spot names the file and
why: give the address); without one it is tried as before (there is no secret to lose).

Ray's own helpers are never used to connect: given a dead or non-GCS address they block ~35 s (see
ray-and-tools-notes §3).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from slime_hangdoctor.collect.cluster_scope import is_local_address
from slime_hangdoctor.collect.dashboard import DashboardClient, HttpResult
from slime_hangdoctor.collect.options import resolve_token
from slime_hangdoctor.collect.tcp_tables import TcpTables, listening_rows
from slime_hangdoctor.errors import RayUnreachable
from slime_hangdoctor.safe_fs import file_problem, read_regular, trusted_owners

DEFAULT_DASHBOARD_PORT = 8265
DEFAULT_GCS_PORT = 6379
CHECK_TIMEOUT_S = 2.0  # one /api/version or GCS call, at most
GUESS_HELP = (
    "The Ray token is sent only to an address you give (or one a trusted local file names): "
    "pass the dashboard's URL, e.g. `slime-hangdoctor attach http://HOST:8265`."
)


@dataclass(frozen=True)
class Cluster:
    """A dashboard that answered, and how it was found."""

    dashboard_url: str
    gcs_address: str | None
    tried: tuple[str, ...]
    ray_version: str | None
    session_name: str | None = None
    # local cluster files not trusted, each with why: their addresses were not sent the token
    distrusted: tuple[str, ...] = ()
    # May the Ray token go to this dashboard, and to the GCS its answers name? False for a guessed
    # address (it answered without the token: the cluster has no token auth)
    token_ok: bool = True


# --------------------------------------------------------------------------- candidates


@dataclass(frozen=True)
class _Dashboard:
    """A dashboard URL to ask `GET /api/version`."""

    form: str  # where it came from, as the run's `address_forms_tried` says it
    url: str
    gcs: str | None  # the GCS of its cluster, when known
    trusted: bool  # may be sent the token (the user's address, a trusted file's, or its GCS's)
    deferred: bool = False  # asked only once every slot before it has failed


@dataclass(frozen=True)
class _Gcs:
    """A GCS to ask for its dashboard's address (each one it names is then a _Dashboard)."""

    form: str
    gcs: str
    deferred: bool = False


@dataclass(frozen=True)
class _Local:
    """A GCS on this machine: its dashboard process, if one of a trusted user runs here."""

    form: str
    gcs: str


_Slot = _Dashboard | _Gcs | _Local


@dataclass
class _Outcome:
    """What one check ended with (None while it runs)."""

    cluster: Cluster | None = None
    why: str | None = None
    auth: bool = False  # 401/403: a dashboard that wants (another) token
    expanded: list[_Dashboard] = field(default_factory=list)  # a GCS's dashboards


class _Search:
    """One resolution: the deadline, the slots in order, the checks in flight and their ends."""

    def __init__(self, timeout: float, token: str | None, uid: int | None = None) -> None:
        self.deadline = time.monotonic() + max(0.1, timeout)
        self.token = token
        self.owners = trusted_owners(uid)
        self.distrusted: list[str] = []
        self.failures: list[str] = []  # the forms that could not even be tried, with why
        self.cond = threading.Condition()
        self.slots: list[_Slot] = []
        self.done: dict[tuple[str, ...], _Outcome] = {}  # check key -> its outcome
        self.started: set[tuple[str, ...]] = set()

    def left(self, cap: float = CHECK_TIMEOUT_S) -> float:
        return min(cap, self.deadline - time.monotonic())

    def fail(self, form: str, why: str) -> None:
        self.failures.append(f"{form}: {why}")

    # ---- checks

    def key(self, slot: _Slot) -> tuple[str, ...]:
        if isinstance(slot, _Gcs):
            return ("gcs", slot.gcs)
        if isinstance(slot, _Local):
            return ("local", slot.gcs)
        return ("http", slot.url, "token" if self.sends_token(slot) else "")

    def sends_token(self, slot: _Dashboard) -> bool:
        return slot.trusted and bool(self.token)

    def start(self, slot: _Slot) -> None:
        """Start the check of `slot` in a daemon thread (once per key): a peer that dawdles
        never holds the process at exit."""
        key = self.key(slot)
        with self.cond:
            if key in self.started:
                return
            self.started.add(key)
        if isinstance(slot, _Gcs):
            work: Callable[[], _Outcome] = lambda: _ask_gcs(slot, self)  # noqa: E731
        elif isinstance(slot, _Local):
            work = lambda: _ask_local(slot, self)  # noqa: E731
        else:
            work = lambda: _check_dashboard(slot, self)  # noqa: E731

        def run() -> None:
            try:
                outcome = work()
            except Exception as exc:  # noqa: BLE001 - a check never raises past itself
                outcome = _Outcome(why=f"{type(exc).__name__}: {exc}"[:200])
            with self.cond:
                self.done[key] = outcome
                self.cond.notify_all()
            for found in outcome.expanded:  # a GCS's dashboards: asked at once
                self.start(found)

        threading.Thread(target=run, name=f"resolve-{key[0]}", daemon=True).start()

    def outcome(self, slot: _Slot) -> _Outcome | None:
        """The ended check of `slot`, or None while it runs. A trusted slot whose URL answered
        as a dashboard without the token needs no check with it (the cluster has no token auth)."""
        got = self.done.get(self.key(slot))
        if got is None and isinstance(slot, _Dashboard) and self.sends_token(slot):
            plain = self.done.get(("http", slot.url, ""))
            if plain is not None and plain.cluster is not None:
                return plain
        return got


def resolve_cluster(
    address: str | None,
    *,
    timeout: float,
    token: str | None,
    ray_temp_dir: Path | None = None,
    uid: int | None = None,
) -> Cluster:
    """The cluster's dashboard, or RayUnreachable (listing every form tried) within `timeout` s.

    `uid`: the user the run is for (`--uid`): the local cluster's files may also be theirs."""
    search = _Search(timeout, resolve_token(token), uid)
    search.slots = list(_candidates(address, search, ray_temp_dir))
    for slot in search.slots:
        if not (isinstance(slot, (_Dashboard, _Gcs)) and slot.deferred):
            search.start(slot)
    with search.cond:
        while True:
            found = _first_answer(search)
            if found is not None or time.monotonic() >= search.deadline:
                break
            search.cond.wait(timeout=max(0.01, search.deadline - time.monotonic()))
    if isinstance(found, Cluster):
        return found
    raise _unreachable(address, search)


def _first_answer(search: _Search) -> Cluster | bool | None:
    """Walk the slots in order (a GCS's dashboards in its place): the first that answered as a
    dashboard, once every one before it has failed; False when all have failed; None while one
    before any answer still runs. A deferred slot is started when its turn comes (every slot
    before it has failed). Under search.cond."""
    tried: list[str] = []
    for slot in _walk(search):
        search.start(slot)  # (started already, but for a deferred one)
        tried.append(_tried_label(slot))
        got = search.outcome(slot)
        if got is None:
            return None
        if got.cluster is not None and isinstance(slot, _Dashboard):
            return Cluster(
                dashboard_url=got.cluster.dashboard_url,
                gcs_address=slot.gcs,
                tried=tuple(tried),
                ray_version=got.cluster.ray_version,
                session_name=got.cluster.session_name,
                distrusted=tuple(search.distrusted),
                token_ok=slot.trusted,
            )
    return False


def _walk(search: _Search) -> Iterator[_Slot]:
    """The slots in order, each GCS followed by the dashboards it named (once it answered);
    each key once (the first place it comes)."""
    seen: set[tuple[str, ...]] = set()
    for slot in search.slots:
        for item in (slot, *_expansion(search, slot)):
            key = search.key(item)
            if key not in seen:
                seen.add(key)
                yield item


def _expansion(search: _Search, slot: _Slot) -> list[_Dashboard]:
    if isinstance(slot, _Dashboard):
        return []
    got = search.done.get(search.key(slot))
    return got.expanded if got is not None else []


def _tried_label(slot: _Slot) -> str:
    if isinstance(slot, _Gcs):
        return f"gcs {slot.gcs}"
    if isinstance(slot, _Local):
        return f"local dashboard process of gcs {slot.gcs}"
    return slot.form if slot.form.endswith(slot.url) else f"{slot.form} -> {slot.url}"


def _candidates(address: str | None, search: _Search, temp_dir: Path | None) -> Iterator[_Slot]:
    """The slots in the order they are worth trying."""
    address = (address or "").strip()
    if address and address != "auto":
        yield from _explicit(address, address, search)
        return
    for var in ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS"):
        value = os.environ.get(var, "").strip()
        if value and value not in ("auto", "local"):
            yield from _explicit(f"{var}={value}", value, search)
    for form, gcs, why in _local_gcs(temp_dir, search.owners):
        if why is not None and search.token:
            search.distrusted.append(
                f"{form}: not trusted ({why}): the Ray token is never sent to an address read "
                "from it; give the cluster's address"
            )
            search.fail(form, f"not tried: not trusted ({why})")
            continue
        yield from _gcs_slots(form, gcs)
    yield _Dashboard("default", f"http://127.0.0.1:{DEFAULT_DASHBOARD_PORT}", None, trusted=False)


def _explicit(form: str, address: str, search: _Search) -> Iterator[_Slot]:
    if "://" in address:
        parts = urlsplit(address)
        host = parts.hostname or "127.0.0.1"
        try:
            port = parts.port
        except ValueError:
            search.fail(form, f"{parts.netloc!r} has no valid port (1-65535)")
            return
        if parts.scheme in ("http", "https"):
            yield _Dashboard(form, f"{parts.scheme}://{_netloc(host, port)}", None, trusted=True)
        elif parts.scheme == "ray":  # the Ray Client's port is not the dashboard's: a guess
            url = f"http://{_netloc(host, DEFAULT_DASHBOARD_PORT)}"
            yield _Dashboard(form, url, None, trusted=False)
        else:
            search.fail(form, f"unknown scheme {parts.scheme!r} (use http://, ray:// or host:port)")
        return
    bad = _bad_port(address)
    if bad is not None:
        search.fail(form, f"{bad!r} is not a port number (1-65535)")
        return
    host, port = _split_host_port(address)
    gcs = _netloc(host, DEFAULT_GCS_PORT if port is None else port)
    yield from _gcs_slots(form, gcs)
    if port is not None:  # a dashboard given without its scheme: asked once the GCS failed
        yield _Dashboard(form, f"http://{_netloc(host, port)}", None, trusted=True, deferred=True)
    yield _Dashboard(form, f"http://{_netloc(host, DEFAULT_DASHBOARD_PORT)}", gcs, trusted=False)


def _gcs_slots(form: str, gcs: str) -> Iterator[_Slot]:
    """A GCS on this machine: its dashboard process first (a read of /proc, no gRPC), then its
    KV if that found none that answers; a GCS elsewhere: its KV."""
    host, port = _split_host_port(gcs)
    if port is not None and (_is_loopback(host) or is_local_address(host)):
        yield _Local(form, gcs)
        yield _Gcs(form, gcs, deferred=True)
    else:
        yield _Gcs(form, gcs)


def _reachable_forms(stored: str, gcs_host: str) -> list[str]:
    """Dashboard URLs for the KV's bind address: a wildcard one means the GCS host; a loopback one
    is only reachable when the GCS host is this machine (else it would hit another local cluster)."""
    host, port = _split_host_port(stored)
    if port is None:
        return []
    if host in ("0.0.0.0", "::", ""):
        host = gcs_host
    if _is_loopback(host) and not _is_loopback(gcs_host):
        if not is_local_address(gcs_host):
            return [f"http://{_netloc(gcs_host, port)}"]
        return [f"http://{_netloc(host, port)}", f"http://{_netloc(gcs_host, port)}"]
    return [f"http://{_netloc(host, port)}"]


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def _local_gcs(
    temp_dir: Path | None, owners: frozenset[int]
) -> Iterator[tuple[str, str, str | None]]:
    """(form, GCS address, why the file it came from is not trusted or None) of the local cluster.
    Read without blocking and never through a symlink at the file itself (a FIFO planted there
    must not hang discovery)."""
    root = temp_dir or _ray_temp_dir()
    current = root / "ray_current_cluster"
    text = _small_text(current)
    if text:
        why = file_problem(current, owners) or _stale(current, text, root, owners)
        yield f"local cluster ({current})", text, why
    session = root / "session_latest"
    try:
        port_files = sorted(session.glob("gcs_server_port_*"))
    except OSError:
        port_files = []
    for f in port_files[:1]:
        try:
            port = int(_small_text(f))
        except ValueError:
            continue
        yield f"local session ({session})", f"127.0.0.1:{port}", file_problem(f, owners)


STALE_SLACK_S = 2.0  # `ray start` links session_latest first, then writes ray_current_cluster


def _stale(current: Path, gcs: str, root: Path, owners: frozenset[int]) -> str | None:
    """Why a trusted `ray_current_cluster` no longer names the running cluster, or None: it is
    older than the latest session (`ray start` writes it after linking `session_latest`, so a
    cluster started since left it behind), or it names a GCS port of this machine that no
    listening socket of `owners` holds (the cluster is gone; anyone may take its port)."""
    try:
        written = os.lstat(current).st_mtime
        started = os.lstat(root / "session_latest").st_mtime
    except OSError:
        started = None
    if started is not None and written + STALE_SLACK_S < started:
        return f"stale: older than the latest session ({root / 'session_latest'})"
    host, port = _split_host_port(gcs)
    if port is None or not (_is_loopback(host) or is_local_address(host)):
        return None
    holders = _listening_uids(port)
    if holders is None:
        return None  # no TCP tables here to tell
    if not holders:
        return f"stale: nothing listens on {gcs}"
    if not holders <= owners:
        return f"stale: {gcs} is held by uid {min(holders - owners)}"
    return None


def _listening_uids(port: int, procfs: str = "/proc") -> set[int] | None:
    """The uids owning a listening TCP socket on `port` (/proc/net/tcp and tcp6: each socket's
    uid is there); None where neither table can be read."""
    rows = listening_rows(TcpTables(procfs))
    if rows is None:
        return None
    return {
        int(f[7]) for _, f in rows if int(f[1].rpartition(":")[2], 16) == port and f[7].isdigit()
    }


def _small_text(path: Path) -> str:
    try:
        data = read_regular(path, 4096)
    except OSError:
        return ""
    if data is None:
        return ""
    return data.decode("utf-8", "replace").strip()


def _ray_temp_dir() -> Path:
    from slime_hangdoctor.collect.cluster_scope import ray_temp_dir

    return ray_temp_dir()


# --------------------------------------------------------------------------- checks


def _check_dashboard(slot: _Dashboard, search: _Search) -> _Outcome:
    """`GET /api/version` of one candidate, with the token only where it may go."""
    wait = search.left()
    if wait <= 0.05:
        return _Outcome(why="not tried: out of time")
    token = search.token if search.sends_token(slot) else ""
    res = DashboardClient(slot.url, token=token or "", timeout=wait).get("/api/version")
    return _version_outcome(slot, res, sent_token=bool(token), token_known=bool(search.token))


def _version_outcome(
    slot: _Dashboard, res: HttpResult, *, sent_token: bool, token_known: bool
) -> _Outcome:
    if res.status is None:
        return _Outcome(why=res.error or "no answer")
    if res.status in (401, 403):
        if sent_token:
            why = "token refused"
        elif token_known:  # a guessed address: the token is not sent there
            why = "no token sent: the address was guessed, not given"
        else:
            why = "no token sent"
        return _Outcome(why=f"HTTP {res.status} ({why})", auth=True)
    if res.status != 200:
        return _Outcome(why=f"HTTP {res.status}: not a Ray dashboard")
    try:
        doc = json.loads(res.body)
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict) or not ("ray_version" in doc or "version" in doc):
        return _Outcome(why="answered, but not as a Ray dashboard (/api/version)")
    return _Outcome(
        cluster=Cluster(
            dashboard_url=slot.url,
            gcs_address=slot.gcs,
            tried=(),
            ray_version=_str_or_none(doc.get("ray_version")),
            session_name=_str_or_none(doc.get("session_name")),
        )
    )


def _ask_local(slot: _Local, search: _Search) -> _Outcome:
    """The dashboards that a trusted user's Ray dashboard process on this machine serves for
    this GCS: its command line names its GCS (`--gcs-address`), its bind address and port
    (`--host`, `--port`). Each is a trusted candidate: the process is the one that stored its
    address in the GCS's KV, and no other local user can run a process of a trusted user."""
    host, port = _split_host_port(slot.gcs)
    urls = [
        url
        for dash_host, dash_port in _dashboard_processes(port, search.owners)
        for url in _reachable_forms(_netloc(dash_host, dash_port), host)
    ]
    if not urls:
        return _Outcome(why="no dashboard process of a trusted user for it here")
    form = f"{slot.form} (dashboard process of gcs {slot.gcs})"
    return _Outcome(expanded=[_Dashboard(form, u, slot.gcs, trusted=True) for u in urls])


DASHBOARD_SCRIPT = b"/ray/dashboard/dashboard.py"  # how Ray's node starts its dashboard


def _dashboard_processes(gcs_port: int | None, owners: frozenset[int]) -> list[tuple[str, int]]:
    """(host, port) of each Ray dashboard process on this machine, of a trusted owner, whose
    GCS is on this machine at `gcs_port`. One small read of /proc per process (its command line,
    at most 16 KiB): about a tenth of what a process table through psutil costs."""
    if gcs_port is None:
        return []
    found: list[tuple[str, int]] = []
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                raw = f.read(16384)
        except OSError:
            continue
        if DASHBOARD_SCRIPT not in raw:
            continue
        args = dict(
            a.decode("utf-8", "replace")[2:].partition("=")[::2]
            for a in raw.split(b"\0")
            if a.startswith(b"--") and b"=" in a
        )
        gcs_host, gcs_at = _split_host_port(args.get("gcs-address", ""))
        dash_port = args.get("port", "")
        if gcs_at != gcs_port or not dash_port.isdigit() or int(dash_port) == 0:
            continue
        if not (_is_loopback(gcs_host) or is_local_address(gcs_host)):
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid not in owners:
                continue
        except OSError:
            continue
        found.append((args.get("host") or "127.0.0.1", int(dash_port)))
    return found


def _ask_gcs(slot: _Gcs, search: _Search) -> _Outcome:
    """The dashboards the GCS names (its KV's stored address), each a trusted candidate."""
    stored, why = _dashboard_from_gcs(slot.gcs, search)
    if stored is None:
        return _Outcome(why=why)
    host, _ = _split_host_port(slot.gcs)
    urls = _reachable_forms(stored, host)
    if not urls:
        return _Outcome(why=f"its dashboard address {stored[:80]!r} has no port")
    form = f"{slot.form} (gcs {slot.gcs})"
    return _Outcome(expanded=[_Dashboard(form, url, slot.gcs, trusted=True) for url in urls])


def _dashboard_from_gcs(gcs: str, search: _Search) -> tuple[str | None, str]:
    """(the dashboard address stored in the GCS KV, or None; why not)."""
    from slime_hangdoctor.collect.gcs_kv import GcsFailure, kv_get

    host, port = _split_host_port(gcs)
    if port is None:
        return None, "no port"
    wait = search.left()
    if wait <= 0.05:
        return None, "not tried: out of time"
    try:  # a cheap TCP probe first: refused / unroutable ends here, without importing grpc
        with socket.create_connection((host, port), timeout=wait):
            pass
    except OSError as exc:
        return None, _socket_error(exc)
    answer = kv_get(gcs, b"dashboard", b"dashboard", token=search.token, timeout=search.left())
    if answer.value is not None:
        value = answer.value.decode("utf-8", "replace").strip()
        if value:
            return value, ""
    words = {
        GcsFailure.NO_GRPC: f"cannot ask the GCS (grpc/protobuf not importable: {answer.detail})",
        GcsFailure.TIMEOUT: "no GCS answer in time",
        GcsFailure.NOT_GCS: "not a GCS (an HTTP server answered)",
        GcsFailure.UNAUTHENTICATED: "the GCS wants Ray's auth token",
        GcsFailure.EMPTY: "the GCS knows no dashboard (started with --include-dashboard=false?)",
    }
    failure = answer.failure or GcsFailure.EMPTY
    return None, words.get(failure, f"{failure.value}: {answer.detail}")


def _socket_error(exc: OSError) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return "timed out: no answer in time"
    if isinstance(exc, socket.gaierror):
        return "unknown host"
    return f"cannot connect: {exc.strerror or exc}"


def _unreachable(address: str | None, search: _Search) -> RayUnreachable:
    given = address or "auto"
    failures = list(search.failures)
    auth: list[tuple[_Dashboard, str]] = []
    with search.cond:
        for slot in _walk(search):
            label = slot.url if isinstance(slot, _Dashboard) else _tried_label(slot)
            got = search.outcome(slot)
            ran = search.key(slot) in search.started
            if got is None:
                failures.append(
                    f"{label}: {'timed out: no answer in time' if ran else 'not tried: out of time'}"
                )
                continue
            if isinstance(slot, _Dashboard) and got.auth:
                auth.append((slot, f"{slot.url} answered {got.why}"))
            if got.why and not got.expanded and not isinstance(slot, _Local):
                failures.append(f"{label}: {got.why}")  # (finding no local process is no failure)
    lines = "; ".join(failures) or "nothing to try"
    if auth:
        guessed = all(not slot.trusted for slot, _ in auth) and bool(search.token)
        return RayUnreachable(
            f"the Ray dashboard wants a token: {auth[0][1]}. Forms tried: {lines}",
            help_text=GUESS_HELP
            if guessed
            else (
                "Pass --ray-token, or set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH "
                "(Ray reads ~/.ray/auth_token by default); `ray get-auth-token` prints it."
            ),
        )
    return RayUnreachable(f"no Ray dashboard answered for address {given!r}. Forms tried: {lines}")


# --------------------------------------------------------------------------- small helpers


def _split_host_port(address: str) -> tuple[str, int | None]:
    address = address.strip()
    if address.startswith("["):  # [ipv6]:port
        host, _, rest = address[1:].partition("]")
        port = rest.lstrip(":")
        return host, int(port) if port.isdigit() else None
    if address.count(":") == 1:
        host, _, port = address.partition(":")
        return host or "127.0.0.1", int(port) if port.isdigit() else None
    return address or "127.0.0.1", None


def _bad_port(address: str) -> str | None:
    """The port text of `host:port` / `[v6]:port` when it is not a port number, else None."""
    address = address.strip()
    if address.startswith("["):
        rest = address.partition("]")[2]
        if not rest:
            return None  # [v6] without a port
        text = rest[1:] if rest.startswith(":") else rest
    elif address.count(":") == 1:
        text = address.partition(":")[2]
    else:
        return None  # a bare host or a bare IPv6 address: no port given
    if text.isdigit() and 0 < int(text) < 65536:
        return None
    return text


def _netloc(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port is not None else shown


def _str_or_none(value: object) -> str | None:
    return str(value) if value not in (None, "") else None

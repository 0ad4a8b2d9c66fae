"""Find a Ray cluster's dashboard from whatever address a user gives, fast, never hanging.

Address forms:

- ``None`` / ``"auto"``: ``RAY_API_SERVER_ADDRESS``, then ``RAY_ADDRESS`` (each in any form below),
  then the local cluster (``<ray temp dir>/ray_current_cluster``, then the GCS port file in
  ``<ray temp dir>/session_latest``), then ``http://127.0.0.1:8265``. The Ray temp dir is found as
  Ray finds it: ``$RAY_TMPDIR/ray``, else ``$TMPDIR/ray``, else ``/tmp/ray``.
- ``"host:port"`` (GCS): the dashboard address is read from the GCS internal KV (key ``dashboard``,
  namespace ``dashboard``) with one gRPC call under a deadline; then ``http://host:port`` (a
  dashboard given without its scheme), then ``http://host:8265``.
- ``"http(s)://host:port"``: the dashboard itself. ``"ray://host:port"`` (Ray Client): host:8265.

The local cluster's files are trusted only as safe_fs says: the file belongs to root, to the
doctor's user or to the ``--uid`` given, and no directory on its path may be written by anyone
else (sticky ones excepted). Ray makes its temp dir and session dirs mode 0777 without a sticky
bit, so any local user can plant these files there. An address read from a file not trusted so is
never sent the Ray token: with a token, it is not tried at all (a blind spot names the file and
why: give the address); without one it is tried as before (there is no secret to lose).

Each candidate dashboard is checked with ``GET /api/version``. Ray's own helpers are never used to
connect: given a dead or non-GCS address they block ~35 s (see ray-and-tools-notes §3).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from slime_hangdoctor.collect.dashboard import DashboardClient
from slime_hangdoctor.collect.options import resolve_token
from slime_hangdoctor.errors import RayUnreachable
from slime_hangdoctor.safe_fs import file_problem, read_regular, trusted_owners

DEFAULT_DASHBOARD_PORT = 8265
DEFAULT_GCS_PORT = 6379
CHECK_TIMEOUT_S = 2.0  # one /api/version or GCS call, at most


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


class _Auth(Exception):
    """The dashboard answered 401/403: it exists, but wants (another) token."""


class _Search:
    """State of one resolution: the deadline, what was tried and why each form failed."""

    def __init__(self, timeout: float, token: str | None, uid: int | None = None) -> None:
        self.deadline = time.monotonic() + max(0.1, timeout)
        self.token = token
        self.owners = trusted_owners(uid)
        self.distrusted: list[str] = []
        self.tried: list[str] = []
        self.failures: list[str] = []
        self.auth_failure: str | None = None
        self.seen: set[str] = set()

    def left(self, cap: float = CHECK_TIMEOUT_S) -> float:
        return min(cap, self.deadline - time.monotonic())

    def fail(self, form: str, why: str) -> None:
        self.failures.append(f"{form}: {why}")


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
    for form, gcs, url in _candidates(address, search, ray_temp_dir):
        if url in search.seen:
            continue
        search.seen.add(url)
        if search.left() <= 0.05:
            search.fail(form, "not tried: out of time")
            break
        search.tried.append(form if form.endswith(url) else f"{form} -> {url}")
        found = _check_dashboard(url, gcs, search, form)
        if found is not None:
            return dataclasses.replace(found, distrusted=tuple(search.distrusted))
    raise _unreachable(address, search)


# --------------------------------------------------------------------------- candidates


def _candidates(
    address: str | None, search: _Search, temp_dir: Path | None
) -> Iterator[tuple[str, str | None, str]]:
    """(form, gcs address or None, dashboard URL) in the order they are worth trying."""
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
        yield from _from_gcs(form, gcs, search, fallbacks=False)
    yield "default", None, f"http://127.0.0.1:{DEFAULT_DASHBOARD_PORT}"


def _explicit(form: str, address: str, search: _Search) -> Iterator[tuple[str, str | None, str]]:
    if "://" in address:
        parts = urlsplit(address)
        host = parts.hostname or "127.0.0.1"
        try:
            port = parts.port
        except ValueError:
            search.fail(form, f"{parts.netloc!r} has no valid port (1-65535)")
            return
        if parts.scheme in ("http", "https"):
            yield form, None, f"{parts.scheme}://{_netloc(host, port)}"
        elif parts.scheme == "ray":
            yield form, None, f"http://{_netloc(host, DEFAULT_DASHBOARD_PORT)}"
        else:
            search.fail(form, f"unknown scheme {parts.scheme!r} (use http://, ray:// or host:port)")
        return
    bad = _bad_port(address)
    if bad is not None:
        search.fail(form, f"{bad!r} is not a port number (1-65535)")
        return
    host, port = _split_host_port(address)
    if port is None:
        yield from _from_gcs(form, f"{_netloc(host, DEFAULT_GCS_PORT)}", search)
        return
    yield from _from_gcs(form, _netloc(host, port), search)


def _from_gcs(
    form: str, gcs: str, search: _Search, *, fallbacks: bool = True
) -> Iterator[tuple[str, str | None, str]]:
    """Dashboard URLs for a GCS address: from the GCS KV, then host:port and host:8265 as HTTP."""
    host, port = _split_host_port(gcs)
    search.tried.append(f"gcs {gcs}")
    stored, why = _dashboard_from_gcs(gcs, search)
    if stored is not None:
        yield from ((f"{form} (gcs {gcs})", gcs, url) for url in _reachable_forms(stored, host))
    else:
        search.fail(f"gcs {gcs}", why)
    if fallbacks:
        if port is not None:
            yield form, None, f"http://{_netloc(host, port)}"
        yield form, gcs, f"http://{_netloc(host, DEFAULT_DASHBOARD_PORT)}"


def _reachable_forms(stored: str, gcs_host: str) -> list[str]:
    """Dashboard URLs for the KV's bind address: a wildcard one means the GCS host; a loopback one
    is only reachable when the GCS host is this machine (else it would hit another local cluster)."""
    host, port = _split_host_port(stored)
    if port is None:
        return []
    if host in ("0.0.0.0", "::", ""):
        host = gcs_host
    if _is_loopback(host) and not _is_loopback(gcs_host):
        if not _is_local_address(gcs_host):
            return [f"http://{_netloc(gcs_host, port)}"]
        return [f"http://{_netloc(host, port)}", f"http://{_netloc(gcs_host, port)}"]
    return [f"http://{_netloc(host, port)}"]


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def _is_local_address(host: str) -> bool:
    """Is `host` an address of this machine? (binding to it only works if it is)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
    except OSError:
        return False
    return True


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
        yield f"local cluster ({current})", text, file_problem(current, owners)
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


def _small_text(path: Path) -> str:
    try:
        data = read_regular(path, 4096)
    except OSError:
        return ""
    if data is None:
        return ""
    return data.decode("utf-8", "replace").strip()


def _ray_temp_dir() -> Path:
    base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return Path(base) / "ray"


# --------------------------------------------------------------------------- checks


def _check_dashboard(url: str, gcs: str | None, search: _Search, form: str) -> Cluster | None:
    client = DashboardClient(url, token=search.token or "", timeout=max(0.05, search.left()))
    res = client.get("/api/version")
    if res.status is None:
        search.fail(url, res.error or "no answer")
        return None
    if res.status in (401, 403):
        why = "no token sent" if not search.token else "token refused"
        search.auth_failure = f"{url} answered HTTP {res.status} ({why})"
        search.fail(url, f"HTTP {res.status} ({why})")
        return None
    if res.status != 200:
        search.fail(url, f"HTTP {res.status}: not a Ray dashboard")
        return None
    try:
        doc = json.loads(res.body)
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict) or not ("ray_version" in doc or "version" in doc):
        search.fail(url, "answered, but not as a Ray dashboard (/api/version)")
        return None
    return Cluster(
        dashboard_url=url,
        gcs_address=gcs,
        tried=tuple(search.tried),
        ray_version=_str_or_none(doc.get("ray_version")),
        session_name=_str_or_none(doc.get("session_name")),
    )


def _dashboard_from_gcs(gcs: str, search: _Search) -> tuple[str | None, str]:
    """(the dashboard address stored in the GCS KV, or None; why not)."""
    host, port = _split_host_port(gcs)
    if port is None:
        return None, "no port"
    wait = search.left()
    if wait <= 0.05:
        return None, "not tried: out of time"
    try:  # a cheap TCP probe first: refused / unroutable ends here, without importing Ray
        with socket.create_connection((host, port), timeout=wait):
            pass
    except OSError as exc:
        return None, _socket_error(exc)
    try:
        grpc: Any = importlib.import_module("grpc")
        pb2: Any = importlib.import_module("ray.core.generated.gcs_service_pb2")
        pb2_grpc: Any = importlib.import_module("ray.core.generated.gcs_service_pb2_grpc")
    except ImportError as exc:
        return None, f"cannot ask the GCS (ray/grpc not importable: {exc})"
    metadata = [("authorization", f"Bearer {search.token}")] if search.token else None
    channel = grpc.insecure_channel(gcs)
    try:
        stub = pb2_grpc.InternalKVGcsServiceStub(channel)
        # `namespace` is a Python keyword-ish name in the generated class: pass it by dict.
        request = pb2.InternalKVGetRequest(key=b"dashboard", **{"namespace": b"dashboard"})
        reply = stub.InternalKVGet(request, timeout=max(0.05, search.left()), metadata=metadata)
    except grpc.RpcError as exc:
        return None, _grpc_error(exc)
    finally:
        channel.close()
    value = bytes(reply.value).decode("utf-8", "replace").strip()
    if not value:
        return None, "the GCS knows no dashboard (started with --include-dashboard=false?)"
    return value, ""


def _grpc_error(exc: object) -> str:
    code = getattr(exc, "code", lambda: None)()
    details = str(getattr(exc, "details", lambda: "")() or "")
    name = getattr(code, "name", str(code))
    if "http1" in details.lower() or "http/2" in details.lower():
        return "not a GCS (an HTTP server answered)"
    if name == "DEADLINE_EXCEEDED":
        return "no GCS answer in time"
    if name == "UNAUTHENTICATED":
        return "the GCS wants Ray's auth token"
    return f"gRPC {name}: {details[:160]}"


def _socket_error(exc: OSError) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, socket.gaierror):
        return "unknown host"
    return f"cannot connect: {exc.strerror or exc}"


def _unreachable(address: str | None, search: _Search) -> RayUnreachable:
    given = address or "auto"
    lines = "; ".join(search.failures) or "nothing to try"
    if search.auth_failure:
        return RayUnreachable(
            f"the Ray dashboard wants a token: {search.auth_failure}. Forms tried: {lines}",
            help_text=(
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

"""Who waits on whom over the network: each slime process's TCP connections mapped to known peers.

py-spy cannot see asyncio tasks: the RolloutManager's thousands of `generate` coroutines, SGLang's
tokenizer manager, the router, all look like an event loop idle in `epoll`. Their sockets still say
where the requests are. A peer is an engine (its HTTP port), the router, the Ray dashboard, the GCS,
a process-group store (a train rank's MASTER_PORT), a proxy (from a process's proxy variables),
another slime process (one of its listening ports), or unknown.

The engine-level fact: callers hold connections to an engine across both samples while its
scheduler reports no running and no queued request and its counters do not move. The requests are
held outside the scheduler: an engine left paused (AReaL#1160: `pause_generation` with no
`continue_generation`), a tokenizer-side lock (sglang PR#29670), a request never reaped (miles
PR#1585). An HTTP keep-alive connection also stays open while idle, but servers close those after a
few seconds (uvicorn: 5 s); an engine singled out among its peers, or with bytes its server never
read, is not pooling.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from urllib.parse import urlsplit

from slime_hangdoctor.analysis.engines import EngineRead
from slime_hangdoctor.analysis.services import Service, job_services
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.facts import PROXY_ENV, TcpConnection
from slime_hangdoctor.verdict import Finding, Role, Severity

_WAITING = ("ESTABLISHED", "SYN_SENT")  # a request in flight, or a connect that never completes
_LOOPBACK = ("127.", "::1", "0.0.0.0", "::")


@dataclass(frozen=True)
class Endpoint:
    kind: str  # engine | router | dashboard | gcs | store | proxy | slime | external | unknown
    label: str
    engine_url: str | None = None
    service: Service | None = None  # what the job's configuration says an external peer is


@dataclass(frozen=True)
class HeldRequests:
    """Callers hold connections to an engine whose scheduler has no work (typed for other rules)."""

    engine: EngineRead
    callers: tuple[tuple[Proc, int], ...]  # (caller, connections it holds), most first
    persistent: bool  # the same connections were open at both samples
    unread_bytes: int  # request bytes the engine's server has not read (its receive queues)
    singled_out: bool  # other engines of the job hold no such connections

    @property
    def connections(self) -> int:
        return sum(n for _, n in self.callers)

    def describe(self) -> str:
        who = ", ".join(f"{p.label} (pid {p.pid}) {n}" for p, n in self.callers[:4])
        held = "across both samples" if self.persistent else "at the last sample"
        text = (
            f"{self.connections} connection(s) to engine {self.engine.url} held {held} ({who}) "
            f"while its scheduler reports {self.engine.running or 0:.0f} running and "
            f"{self.engine.queued or 0:.0f} queued requests"
        )
        if self.unread_bytes:
            text += f"; {self.unread_bytes} request bytes wait unread in its server's sockets"
        return text


def _host_key(ip: str, node_ip: str | None) -> str:
    """Loopback and wildcard addresses mean the node itself."""
    if ip.startswith(_LOOPBACK) or ip in ("localhost", ""):
        return node_ip or "local"
    return ip


def _url_key(url: str, node_ip: str | None) -> tuple[str, int] | None:
    try:
        parts = urlsplit(url if "//" in url else f"//{url}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return (_host_key(parts.hostname or "", node_ip), port)


class PeerMap:
    """(host, port) -> Endpoint, with a port-only fallback when the host is ambiguous (local runs
    have no node IPs; a listener on 0.0.0.0 answers on every address of its node)."""

    def __init__(self) -> None:
        self.exact: dict[tuple[str, int], Endpoint] = {}
        self.ports: dict[int, set[Endpoint]] = {}

    def add(self, key: tuple[str, int] | None, ep: Endpoint, *, override: bool = False) -> None:
        if key is None:
            return
        if key in self.exact and not override:
            return  # a peer already known by its URL keeps that name
        old = self.exact.get(key)
        if old is not None:
            self.ports.get(key[1], set()).discard(old)
        self.exact[key] = ep
        self.ports.setdefault(key[1], set()).add(ep)

    def lookup(self, conn: TcpConnection) -> Endpoint:
        key = (_host_key(conn.socket.remote_ip, conn.node_ip), conn.socket.remote_port)
        found = self.exact.get(key)
        if found is not None:
            return found
        by_port = self.ports.get(key[1], set())
        if len(by_port) == 1:
            return next(iter(by_port))
        return Endpoint("unknown", conn.remote)


def peer_map(world: World, engines: tuple[EngineRead, ...]) -> PeerMap:
    peers = PeerMap()
    for e in engines:
        node = e.node_ip or (e.server.node_ip if e.server else None)
        peers.add(
            _url_key(e.url, node), Endpoint("engine", f"engine {e.url}", e.url), override=True
        )
    for url in world.topology.routers:
        peers.add(_url_key(str(url), None), Endpoint("router", f"router {url}"), override=True)
    target = world.snapshot.manifest.target
    for key, kind in (("dashboard_url", "dashboard"), ("gcs_address", "gcs")):
        value = target.get(key)
        if isinstance(value, str) and value:
            peers.add(_url_key(value, None), Endpoint(kind, f"Ray {kind} {value}"))
    # Proxies before listeners: a proxy that a slime process itself listens for (a local relay,
    # the demo's black hole) is named by what the callers' environment makes of it.
    for p in world.procs:
        info = p.infos[-1][1] if p.infos else None
        for name, value in info.env.items() if info is not None else ():
            if name.lower() in PROXY_ENV and name.lower() != "no_proxy" and value:
                peers.add(_url_key(value, p.node_ip), Endpoint("proxy", f"proxy {value}"))
    for p in world.procs:
        info = p.infos[-1][1] if p.infos else None
        if info is None:
            continue
        store = info.env.get("MASTER_PORT")
        for addr in info.listen_addrs:
            at = _url_key(addr, p.node_ip)
            if at is None:
                continue
            if store is not None and store.isdigit() and at[1] == int(store):
                peers.add(at, Endpoint("store", f"process-group store of {p.label}"))
            elif p.engine_url is not None:  # not its HTTP port: that one is known by its URL
                peers.add(at, Endpoint("slime", f"{p.label} port {at[1]}"))
            elif p.role is Role.ROUTER:
                peers.add(at, Endpoint("router", p.label))
            else:
                peers.add(at, Endpoint("slime", p.label))
    # Last: a URL of the job's configuration that no process of the job serves is outside it.
    for svc in job_services(world):
        peers.add(
            (_host_key(svc.host, svc.node_ip), svc.port),
            Endpoint("external", svc.label, service=svc),
        )
    return peers


@dataclass(frozen=True)
class KeptConnections:
    """The connections one process held across both samples, by the peer they go to."""

    proc: Proc
    peers: tuple[tuple[Endpoint, int], ...]  # (peer, connections), most first

    def to(self, *kinds: str) -> tuple[tuple[Endpoint, int], ...]:
        return tuple((ep, n) for ep, n in self.peers if ep.kind in kinds)

    def describe(self) -> str:
        if not self.peers:
            return (
                f"{self.proc.label} (pid {self.proc.pid}) holds no request connection across "
                "both samples (procfs sockets)"
            )
        held = ", ".join(f"{n} to {ep.label}" for ep, n in self.peers[:4])
        return f"{self.proc.label} (pid {self.proc.pid}) holds across both samples: {held}"


def kept_connections(
    world: World, engines: tuple[EngineRead, ...], p: Proc
) -> KeptConnections | None:
    """What `p` held open (established or connecting) at both samples, by peer; None when its
    sockets were not read at two different samples (no sockets source, one sample)."""
    if len(p.conns) < 2 or p.conns[0][0] == p.conns[-1][0]:
        return None
    peers = peer_map(world, engines)
    before = {c.socket.local_port for c in _waiting(p.conns[0][1])}
    counts: Counter[Endpoint] = Counter(
        peers.lookup(c) for c in _waiting(p.conns[-1][1]) if c.socket.local_port in before
    )
    return KeptConnections(p, tuple(counts.most_common()))


def _latest(p: Proc) -> tuple[int, tuple[TcpConnection, ...]] | None:
    return p.conns[-1] if p.conns else None


def _waiting(conns: tuple[TcpConnection, ...]) -> list[TcpConnection]:
    return [c for c in conns if c.socket.state in _WAITING]


def held_requests(world: World, engines: tuple[EngineRead, ...]) -> tuple[HeldRequests, ...]:
    """Engines with no scheduler work whose callers hold connections to them (see module doc)."""
    peers = peer_map(world, engines)
    held: list[HeldRequests] = []
    holding: set[str] = set()
    for e in engines:
        own = {p.pid for p in e.procs}
        callers: list[tuple[Proc, int]] = []
        persistent = True
        for p in world.procs:
            if p.pid in own or not p.conns:
                continue
            last = [c for c in _waiting(p.conns[-1][1]) if peers.lookup(c).engine_url == e.url]
            if not last:
                continue
            holding.add(e.url)
            if len(p.conns) >= 2 and p.conns[0][0] != p.conns[-1][0]:
                before = {c.socket.local_port for c in _waiting(p.conns[0][1])}
                kept = [c for c in last if c.socket.local_port in before]
                if not kept:
                    persistent = False
                    continue
                last = kept
            else:
                persistent = False
            callers.append((p, len(last)))
        if not callers or e.in_flight is None or e.in_flight > 0 or e.moving:
            continue
        callers.sort(key=lambda pn: -pn[1])
        held.append(HeldRequests(e, tuple(callers), persistent, _unread(e), True))
    return tuple(
        HeldRequests(
            h.engine,
            h.callers,
            h.persistent,
            h.unread_bytes,
            singled_out=len(holding) < len([e for e in engines if e.in_flight is not None]),
        )
        for h in held
    )


def _unread(e: EngineRead) -> int:
    """Bytes in the receive queues of the engine server's accepted connections, at the last sample."""
    server = e.server
    if server is None or not server.conns:
        return 0
    return sum(c.socket.rx_queue for c in _waiting(server.conns[-1][1]))


def connection_lines(world: World, engines: tuple[EngineRead, ...]) -> list[str]:
    """One line per slime process with connections: how many to each kind of peer, queues."""
    peers = peer_map(world, engines)
    lines: list[str] = []
    for p in world.procs:
        last = _latest(p)
        if p.role is None or last is None or not last[1]:
            continue
        counts: Counter[str] = Counter()
        queued = 0
        for c in _waiting(last[1]):
            ep = peers.lookup(c)
            counts[ep.label if ep.kind != "unknown" else "unknown peers"] += 1
            queued += c.socket.tx_queue
        if not counts:
            continue
        parts = ", ".join(f"{n} to {label}" for label, n in counts.most_common(5))
        tail = f"; {queued} bytes sent and not acknowledged" if queued else ""
        lines.append(f"{p.label} (pid {p.pid}): {parts}{tail}")
    return lines


def network_findings(world: World, engines: tuple[EngineRead, ...]) -> list[Finding]:
    out: list[Finding] = []
    held = held_requests(world, engines)
    if held:
        out.append(
            Finding(
                "requests-held-outside-scheduler",
                Severity.CRITICAL if any(h.persistent for h in held) else Severity.WARNING,
                "Callers hold open request connections (procfs TCP sockets) to engines whose "
                "scheduler has no work: the requests wait outside the scheduler",
                tuple(h.describe() for h in held[:4]),
            )
        )
    lines = connection_lines(world, engines)
    if lines:
        out.append(
            Finding(
                "connections",
                Severity.INFO,
                "Open TCP connections of the slime processes, by peer (procfs sockets)",
                tuple(lines[:8]),
            )
        )
    return out

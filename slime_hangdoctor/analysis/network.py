"""Who waits on whom over the network: each slime process's TCP connections mapped to known peers.

py-spy cannot see asyncio tasks: the RolloutManager's thousands of `generate` coroutines, SGLang's
tokenizer manager, the router, all look like an event loop idle in `epoll`. Their sockets still say
where the requests are. A peer is an engine (its HTTP port), the router, the Ray dashboard, the GCS,
a process-group store (a train rank's MASTER_PORT), a proxy (from a process's proxy variables),
another slime process (one of its listening ports), or unknown.

The engine-level fact: callers hold connections to an engine across both samples while its
scheduler reports no running and no queued request and its counters do not move, AND something
shows a request in flight on them. The requests are held outside the scheduler: an engine left
paused (AReaL#1160: `pause_generation` with no `continue_generation`), a tokenizer-side lock
(sglang PR#29670), a request never reaped (miles PR#1585).

An open connection is not a request in flight (issue 27). Every pooling HTTP client keeps idle
connections open: the sgl-router after it registers a worker (`/health`, `/server_info`,
`/model_info` stay in its keep-alive pool until the server closes them, uvicorn: 5 s), aiohttp,
httpx, a `requests.Session`. So a held connection counts only with evidence of a request on it,
each kind named (`InFlightKind`):

- `engine_http`: the engine's own HTTP layer counts the requests until their response is made
  (`sglang:http_requests_active` for `/generate` and the OpenAI routes), in every sample that read
  `/metrics`;
- `router`: the router counts requests in flight to this engine (`GET /workers` `load`, or
  `smg_worker_requests_active{worker}` on its Prometheus port);
- `socket_queues`: on the held connections, bytes the caller sent and the engine's kernel did not
  acknowledge, or bytes the engine's server did not read, at both samples;
- `caller_awaits`: the caller's own thread awaits an answer at every sample: a blocking HTTP read,
  or a waiting thread in a rollout stage or in a running Ray method (`ray::Class.method`); not
  where the engine's HTTP layer counts no request (the caller then awaits another peer, and its
  connection to this engine is pooled).

Connections with none of them are an idle pool (`idle_pools`): shown as such, never a culprit. Where
the caller is the router, the RolloutManager -> router -> engine chain is named.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar
from urllib.parse import urlsplit

from slime_hangdoctor.analysis.readers.sglang_http import EngineRead, router_entry
from slime_hangdoctor.analysis.services import Service, job_services
from slime_hangdoctor.analysis.signatures import Block
from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.parsers.processes import PROXY_ENV
from slime_hangdoctor.parsers.sglang import HTTP_ANSWERS, HttpPeer, RouterMetrics, SglangMetrics
from slime_hangdoctor.parsers.sockets import TCP_WAITING, TcpConnection
from slime_hangdoctor.topology import ROUTER_TITLE, parse_ray_title
from slime_hangdoctor.verdict import Role, Stage

SOCKETS = Source("sockets")  # TCP connections of the slime processes (procfs)

_LOOPBACK = ("127.", "::1", "0.0.0.0", "::")
T = TypeVar("T")
# The routes a rollout's requests take (SGLang's native one and the OpenAI-compatible ones): their
# `sglang:http_requests_active` counts requests whose response is not made yet. The doctor's own
# probes (`/metrics`, `/v1/loads`...) and the control calls (engines.CALL_STAGES) are not requests.
REQUEST_PATHS = ("/generate", "/v1/completions", "/v1/chat/completions")
# Stages whose waiting thread awaits the answers of the requests it sent
_AWAITING_STAGES = frozenset({Stage.ROLLOUT_DISPATCH, Stage.EVAL})
_AWAITING_BLOCKS = frozenset({Block.WAIT, Block.EVENT_LOOP})


class InFlightKind(str, Enum):
    """The kinds of evidence that a request waits on a held connection (module doc)."""

    ENGINE_HTTP = "engine_http"
    ROUTER = "router"
    SOCKET_QUEUES = "socket_queues"
    CALLER_AWAITS = "caller_awaits"

    @property
    def words(self) -> str:
        """The kind in words, for prose (`engine HTTP count`)."""
        return _IN_FLIGHT_WORDS[self]


_IN_FLIGHT_WORDS: dict[InFlightKind, str] = {
    InFlightKind.ENGINE_HTTP: "engine HTTP count",
    InFlightKind.ROUTER: "router count",
    InFlightKind.SOCKET_QUEUES: "socket queues",
    InFlightKind.CALLER_AWAITS: "caller awaits an answer",
}


@dataclass(frozen=True)
class InFlight:
    kind: InFlightKind
    text: str

    def describe(self) -> str:
        return f"[{self.kind.value}] {self.text}"


class PeerKind(str, Enum):
    """What the peer of a connection is."""

    ENGINE = "engine"  # an SGLang engine of the job
    ROUTER = "router"  # the job's router
    DASHBOARD = "dashboard"  # Ray's dashboard
    GCS = "gcs"  # Ray's GCS
    STORE = "store"  # a process group's TCP store
    PROXY = "proxy"  # an HTTP proxy a slime process's environment names
    SLIME = "slime"  # another slime process
    EXTERNAL = "external"  # a service outside the job that its configuration names
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Endpoint:
    kind: PeerKind
    label: str
    engine_url: str | None = None
    service: Service | None = None  # what the job's configuration says an external peer is


@dataclass(frozen=True)
class HeldRequests:
    """Callers hold connections to an engine whose scheduler has no work (typed for other rules).
    `in_flight` is the evidence of requests on them; without any, the connections are an idle
    pool (`idle_pools`) and `held_requests` leaves them out."""

    engine: EngineRead
    callers: tuple[tuple[Proc, int], ...]  # (caller, connections it holds), most first
    persistent: bool  # the same connections were open at both samples
    unread_bytes: int  # request bytes the engine's server has not read on the callers' connections
    singled_out: bool  # other engines of the job hold no such connections
    in_flight: tuple[InFlight, ...] = ()
    idle: tuple[str, ...] = ()  # what was read and shows no request (for an idle pool)
    chain: tuple[str, ...] = ()  # "rollout manager (pid 1) -> router (pid 2) -> engine URL"

    @property
    def connections(self) -> int:
        return sum(n for _, n in self.callers)

    @property
    def kinds(self) -> tuple[InFlightKind, ...]:
        return tuple(dict.fromkeys(f.kind for f in self.in_flight))

    def _who(self) -> str:
        return ", ".join(f"{p.label} (pid {p.pid}) {n}" for p, n in self.callers[:4])

    def describe(self) -> str:
        held = "across both samples" if self.persistent else "at the last sample"
        text = (
            f"{self.connections} connection(s) to engine {self.engine.url} held {held} "
            f"({self._who()}) while its scheduler reports {self.engine.running or 0:.0f} running "
            f"and {self.engine.queued or 0:.0f} queued requests"
        )
        if self.in_flight:
            text += "; requests in flight on them: " + ", ".join(k.words for k in self.kinds)
        if self.unread_bytes:
            text += f"; {self.unread_bytes} request bytes wait unread in its server's sockets"
        return text

    def describe_idle(self) -> str:
        return (
            f"{self.connections} idle pooled connection(s) to engine {self.engine.url} "
            f"({self._who()}): not a request in flight ({'; '.join(self.idle)})"
        )


def _host_key(ip: str, node_ip: str | None) -> str:
    """Loopback and wildcard addresses mean the node itself."""
    if ip.startswith(_LOOPBACK) or ip in ("localhost", ""):
        return node_ip or "local"
    return ip


@functools.lru_cache(maxsize=4096)
def _url_key(url: str, node_ip: str | None) -> tuple[str, int] | None:
    """(host, port) of a URL or address, its host as `_host_key` keys it; None when it has none.
    Cached: a job's processes share a few dozen listening addresses and proxy URLs, asked for at
    every process by every view of the peers (urlsplit dominated peer_map at 64 nodes)."""
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
        return Endpoint(PeerKind.UNKNOWN, conn.remote)


def peer_map(world: World, engines: tuple[EngineRead, ...]) -> PeerMap:
    """Every known peer of the job by (host, port): built once per world and engines (`_memo`),
    however many views ask for it (issue 46: six builds per analysis, a third of its time at 64
    nodes). Read only by its callers."""
    return _memo(world, "network.peer_map", engines, lambda: _build_peer_map(world, engines))


def _memo(world: World, key: str, engines: tuple[EngineRead, ...], compute: Callable[[], T]) -> T:
    """`compute()` once per world and `engines` (the same tuple, or an equal one)."""
    kept: list[tuple[tuple[EngineRead, ...], object]] = world.memo(key, list)
    for seen, value in kept:
        if seen is engines or seen == engines:
            return value  # type: ignore[return-value]
    value = compute()
    kept.append((engines, value))
    return value


def _build_peer_map(world: World, engines: tuple[EngineRead, ...]) -> PeerMap:
    peers = PeerMap()
    for e in engines:
        node = e.node_ip or (e.server.node_ip if e.server else None)
        peers.add(
            _url_key(e.url, node),
            Endpoint(PeerKind.ENGINE, f"engine {e.url}", e.url),
            override=True,
        )
    router_nodes = {m.engine_url: m.node_ip for m in world.topology.by_role(Role.ROUTER)}
    for url in world.topology.routers:
        at = _url_key(str(url), router_nodes.get(url))
        peers.add(at, Endpoint(PeerKind.ROUTER, f"router {url}"), override=True)
    target = world.snapshot.manifest.target
    for key, kind in (("dashboard_url", PeerKind.DASHBOARD), ("gcs_address", PeerKind.GCS)):
        value = target.get(key)
        if isinstance(value, str) and value:
            peers.add(_url_key(value, None), Endpoint(kind, f"Ray {kind.value} {value}"))
    # Proxies before listeners: a proxy that a slime process itself listens for (a local relay,
    # the demo's black hole) is named by what the callers' environment makes of it.
    for p in world.procs:
        info = p.infos[-1][1] if p.infos else None
        for name, value in info.env.items() if info is not None else ():
            if name.lower() in PROXY_ENV and name.lower() != "no_proxy" and value:
                peers.add(_url_key(value, p.node_ip), Endpoint(PeerKind.PROXY, f"proxy {value}"))
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
                peers.add(at, Endpoint(PeerKind.STORE, f"process-group store of {p.label}"))
            elif p.engine_url is not None:  # not its HTTP port: that one is known by its URL
                peers.add(at, Endpoint(PeerKind.SLIME, f"{p.label} port {at[1]}"))
            elif p.role is Role.ROUTER:
                peers.add(at, Endpoint(PeerKind.ROUTER, p.label))
            else:
                peers.add(at, Endpoint(PeerKind.SLIME, p.label))
    # Last: a URL of the job's configuration that no process of the job serves is outside it.
    for svc in job_services(world):
        peers.add(
            (_host_key(svc.host, svc.node_ip), svc.port),
            Endpoint(PeerKind.EXTERNAL, svc.label, service=svc),
        )
    return peers


@dataclass(frozen=True)
class KeptConnections:
    """The connections one process held across both samples, by the peer they go to."""

    proc: Proc
    peers: tuple[tuple[Endpoint, int], ...]  # (peer, connections), most first

    def to(self, *kinds: PeerKind) -> tuple[tuple[Endpoint, int], ...]:
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
    return [c for c in conns if c.socket.state in TCP_WAITING]


def held_requests(world: World, engines: tuple[EngineRead, ...]) -> tuple[HeldRequests, ...]:
    """Engines with no scheduler work whose callers hold connections to them, with evidence of a
    request in flight on them (see module doc)."""
    return tuple(h for h in _connections_held(world, engines) if h.in_flight)


def idle_pools(world: World, engines: tuple[EngineRead, ...]) -> tuple[HeldRequests, ...]:
    """Connections held to engines with no scheduler work and no evidence of a request on them."""
    return tuple(h for h in _connections_held(world, engines) if not h.in_flight)


_Callers = list[tuple[Proc, list[TcpConnection]]]


def _connections_held(world: World, engines: tuple[EngineRead, ...]) -> tuple[HeldRequests, ...]:
    """Engines whose callers hold connections to them (`held_requests`, `idle_pools`): once per
    world and engines."""
    return _memo(world, "network.held", engines, lambda: _find_held(world, engines))


def _find_held(world: World, engines: tuple[EngineRead, ...]) -> tuple[HeldRequests, ...]:
    peers = peer_map(world, engines)
    # each process's waiting connections at its last sample, by the engine they go to: looked up
    # once, not once per engine (64 engines x 1,300 processes at 64 nodes)
    to_engines = [(p, _by_engine(peers, p.conns[-1][1])) for p in world.procs if p.conns]
    held: list[tuple[EngineRead, _Callers, bool]] = []
    holding: set[str] = set()
    for e in engines:
        own = {p.pid for p in e.procs}
        callers: _Callers = []
        persistent = True
        for p, by_engine in to_engines:
            if p.pid in own:
                continue
            last = by_engine.get(e.url)
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
            callers.append((p, last))
        if not callers or e.in_flight is None or e.in_flight > 0 or e.moving:
            continue
        callers.sort(key=lambda pc: -len(pc[1]))
        held.append((e, callers, persistent))
    known = len([e for e in engines if e.in_flight is not None])
    read = [
        (e, callers, persistent, *_evidence(world, e, callers)) for e, callers, persistent in held
    ]
    # engines other than these hold connections too, but only idle pools: not requests
    pooled = {e.url for e, _, _, evidence, _ in read if not evidence}
    holding -= pooled
    return tuple(
        HeldRequests(
            e,
            tuple((p, len(conns)) for p, conns in callers),
            persistent,
            _unread(e, callers),
            singled_out=len(holding) < known,
            in_flight=evidence,
            idle=idle,
            chain=_chains(world, engines, e, [p for p, _ in callers]),
        )
        for e, callers, persistent, evidence, idle in read
    )


def _by_engine(peers: PeerMap, conns: tuple[TcpConnection, ...]) -> dict[str, list[TcpConnection]]:
    """The waiting connections among `conns` that go to an engine, by its URL, in their order."""
    out: dict[str, list[TcpConnection]] = {}
    for c in _waiting(conns):
        url = peers.lookup(c).engine_url
        if url is not None:
            out.setdefault(url, []).append(c)
    return out


def _evidence(
    world: World, e: EngineRead, callers: _Callers
) -> tuple[tuple[InFlight, ...], tuple[str, ...]]:
    """Evidence of requests in flight on the callers' connections to `e`; where there is none,
    what was read and shows none."""
    found: list[InFlight] = []
    idle: list[str] = []
    active = _http_active(world, e.url)
    if active and all(n > 0 for n in active):
        found.append(
            InFlight(
                InFlightKind.ENGINE_HTTP,
                f"engine {e.url} counts {active[-1]:g} request(s) in flight at its HTTP layer "
                f"(sglang:http_requests_active, {' '.join(REQUEST_PATHS)}) in "
                + ("every sample" if len(active) > 1 else "the sample that read it"),
            )
        )
    elif active:
        idle.append(f"its HTTP layer counts {active[-1]:g} request(s) in flight")
    worker = router_entry(world, e.url)
    routed = router_active(world, e.url)
    views = []
    if worker is not None and worker.load:
        views.append(f"{worker.load} (GET /workers load)")
    if routed and all(n > 0 for n in routed):
        views.append(
            f"{routed[-1]:g} (smg_worker_requests_active, "
            + ("every sample)" if len(routed) > 1 else "the sample that read it)")
        )
    if views:
        found.append(
            InFlight(
                InFlightKind.ROUTER,
                f"the router counts requests in flight to engine {e.url}: {', '.join(views)}",
            )
        )
    elif routed:
        idle.append("the router counts 0 in flight to it (smg_worker_requests_active)")
    elif worker is not None and worker.load is not None:
        idle.append("the router counts 0 in flight to it (GET /workers load)")
    unacked = sum(_queued(p, conns, "tx") for p, conns in callers)
    unread = _unread(e, callers)
    if unacked or unread:
        parts = [
            f"{n} bytes {what}"
            for n, what in ((unacked, "sent and not acknowledged"), (unread, "received not read"))
            if n
        ]
        found.append(
            InFlight(
                InFlightKind.SOCKET_QUEUES,
                f"{' and '.join(parts)} on the held connections to engine {e.url} at both "
                "samples (procfs sockets)",
            )
        )
    else:
        idle.append("empty socket queues")
    awaiting = [(p, why) for p, _ in callers if (why := caller_awaits(p)) is not None]
    if awaiting and active and active[-1] == 0:
        # the engine's HTTP layer counts a request until its response is made: a caller that
        # waits while it counts none awaits another peer (a pooled connection to this one)
        idle.append(f"{awaiting[0][0].label} waits, but not on this engine (its HTTP layer)")
    elif awaiting:
        found.extend(
            InFlight(InFlightKind.CALLER_AWAITS, f"{p.label} (pid {p.pid}) {why}")
            for p, why in awaiting[:2]
        )
    else:
        idle.append("no caller awaits an answer")
    return tuple(found), tuple(idle)


def _http_active(world: World, url: str) -> list[float]:
    """Requests in flight at the engine's HTTP layer (REQUEST_PATHS), per sample whose `/metrics`
    has the HTTP middleware's series (SGLang >= 0.5.9), oldest first."""
    by_sample: dict[int, SglangMetrics] = {}
    for o in world.snapshot.joined(HTTP_ANSWERS):
        m = o.parsed
        if o.kind is not HttpPeer.ENGINE or o.answer.url.rstrip("/") != url:
            continue
        if isinstance(m, SglangMetrics) and (m.http_requests or m.http_active):
            by_sample[o.sample] = m
    return [
        sum(m.http_active.get(path, 0.0) for path in REQUEST_PATHS)
        for _, m in sorted(by_sample.items())
    ]


def router_active(world: World, url: str) -> list[float]:
    """The router's in-flight count for engine `url` (`smg_worker_requests_active` on its
    Prometheus page), per sample whose page lists that worker, oldest first. The router lists a
    worker once it has sent it a request, and only under a policy that counts load (cache_aware
    does, round_robin does not): a page without it says nothing."""
    by_sample: dict[int, float] = {}
    for o in world.snapshot.joined(HTTP_ANSWERS):
        if o.kind is HttpPeer.ROUTER and isinstance(o.parsed, RouterMetrics):
            n = o.parsed.requests_active.get(url.rstrip("/"))
            if n is not None:
                by_sample[o.sample] = by_sample.get(o.sample, 0.0) + n
    return [n for _, n in sorted(by_sample.items())]


def engine_http_idle(world: World, url: str) -> bool:
    """The engine's HTTP layer counts no request in flight in every sample that read it (and was
    read): a connection to it holds no request, whoever waits."""
    active = _http_active(world, url)
    return bool(active) and all(n == 0 for n in active)


def _queued(p: Proc, conns: list[TcpConnection], queue: str) -> int:
    """Bytes in one queue ("tx": sent, not acknowledged; "rx": received, not read) of these
    connections of `p`, counted where non-empty at both samples (the smaller reading)."""
    if len(p.conns) < 2 or p.conns[0][0] == p.conns[-1][0]:
        return 0
    first = {c.socket.local_port: c for c in _waiting(p.conns[0][1])}
    total = 0
    for c in conns:
        before = first.get(c.socket.local_port)
        if before is not None:
            total += min(_queue(before, queue), _queue(c, queue))
    return total


def _queue(c: TcpConnection, queue: str) -> int:
    return c.socket.tx_queue if queue == "tx" else c.socket.rx_queue


def _unread(e: EngineRead, callers: _Callers) -> int:
    """Bytes waiting unread in the engine server's ends of the callers' connections at both
    samples (a probe of the doctor's own is no caller)."""
    server = e.server
    if server is None or not server.conns:
        return 0
    ports = {c.socket.local_port for _, conns in callers for c in conns}
    ends = [c for c in _waiting(server.conns[-1][1]) if c.socket.remote_port in ports]
    return _queued(server, ends, "rx")


def caller_awaits(p: Proc) -> str | None:
    """How `p`'s own thread awaits an answer at every sample its stack was read, or None: a
    blocking HTTP read, or a waiting thread in a rollout stage or a running Ray method."""
    if not p.reads:
        return None
    how = ""
    for r in p.reads:
        parsed = parse_ray_title(r.title or p.title)
        if r.block is Block.HTTP:
            how = "blocks reading an HTTP answer"
        elif r.block not in _AWAITING_BLOCKS:
            return None
        elif r.stage in _AWAITING_STAGES:
            how = f"waits in its {r.stage.label} stage"
        elif parsed is not None and parsed[1] is not None:
            how = f"waits in its running method {parsed[0]}.{parsed[1]}"
        else:
            return None
    samples = "both samples" if len(p.reads) > 1 else "the one sample read"
    return f"{how} (its stack, {samples})"


def is_router(p: Proc) -> bool:
    """The sgl-router: by its role, or by the title `launch_router` gives it (`sglang::router`)
    where the topology names it otherwise."""
    return p.role is Role.ROUTER or p.title.startswith(ROUTER_TITLE)


def _chains(
    world: World, engines: tuple[EngineRead, ...], e: EngineRead, callers: list[Proc]
) -> tuple[str, ...]:
    """RolloutManager -> router -> engine, for each caller that is a router (the RolloutManager
    named where it holds connections to that router across both samples)."""
    out: list[str] = []
    for router in [p for p in callers if is_router(p)]:
        listen = {ep.label for ep in _listeners(router, world, engines)}
        upstream = [
            p
            for p in world.procs
            if p.role is Role.ROLLOUT_MANAGER
            and (kept := kept_connections(world, engines, p)) is not None
            and any(ep.kind is PeerKind.ROUTER or ep.label in listen for ep, _ in kept.peers)
        ]
        hops = [f"{p.label} (pid {p.pid})" for p in upstream[:1]]
        out.append(" -> ".join([*hops, f"router (pid {router.pid})", f"engine {e.url}"]))
    return tuple(out)


def _listeners(p: Proc, world: World, engines: tuple[EngineRead, ...]) -> list[Endpoint]:
    """The peers that `p`'s own listening ports are known as."""
    info = p.infos[-1][1] if p.infos else None
    peers = peer_map(world, engines)
    out: list[Endpoint] = []
    for addr in info.listen_addrs if info is not None else ():
        key = _url_key(addr, p.node_ip)
        if key is not None and key in peers.exact:
            out.append(peers.exact[key])
    return out


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
            counts[ep.label if ep.kind is not PeerKind.UNKNOWN else "unknown peers"] += 1
            queued += c.socket.tx_queue
        if not counts:
            continue
        parts = ", ".join(f"{n} to {label}" for label, n in counts.most_common(5))
        tail = f"; {queued} bytes sent and not acknowledged" if queued else ""
        lines.append(f"{p.label} (pid {p.pid}): {parts}{tail}")
    return lines


def held_lines(h: HeldRequests) -> tuple[str, ...]:
    """The evidence lines of one engine's held requests: the connections, each kind of evidence of
    a request in flight on them, and where the chain through a router stops."""
    chain = tuple(f"chain: {c}: the requests stop at the engine" for c in h.chain)
    return (h.describe(), *(f.describe() for f in h.in_flight), *chain)

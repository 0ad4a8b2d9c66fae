"""The environment of the slime processes: proxies in front of the job's own endpoints.

A proxy variable (http_proxy / https_proxy / all_proxy, any case) in a slime process sends its HTTP
requests to the proxy unless no_proxy covers the host. slime's client (httpx) and the router
(reqwest) honour them: a proxy on the master node that cannot reach the engines stalls the first
rollout (slime#1026 maintainer: "check if you have proxy on the master node so that the router
cannot visit other servers"). Bypass follows Python's own rule (urllib.request
.proxy_bypass_environment: suffixes, `*`, host:port entries).

What the environment adds to a verdict (the proxy and socket-interface findings, the suspects of a
proxy that holds the requests) is the environ part's (analysis/parts/environ.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from slime_hangdoctor.analysis.network import PeerKind, peer_map
from slime_hangdoctor.analysis.readers.sglang_http import EngineRead
from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.parsers.sockets import TCP_WAITING
from slime_hangdoctor.topology import MemberKind
from slime_hangdoctor.verdict import Role

ENVIRON = Source(
    "environ"
)  # the allow-listed environment of the slime processes (proxies, socket interfaces)

# Who sends HTTP requests to the engines and the router.
_HTTP_CALLERS = (Role.ROLLOUT_MANAGER, Role.ROUTER, Role.DRIVER, Role.SGLANG_ENGINE)


@dataclass(frozen=True)
class ProxyHazard:
    proc: Proc
    variable: str  # the variable that applies, as the process spells it
    proxy: str  # its value (credentials already redacted at collection)
    through_proxy: tuple[str, ...]  # job endpoints its requests would send to the proxy
    connected: int = 0  # connections it holds to the proxy (procfs sockets), where read

    def describe(self) -> str:
        text = (
            f"{self.proc.label} (pid {self.proc.pid}) has {self.variable}={self.proxy}; "
            f"no_proxy does not cover {', '.join(self.through_proxy[:3])}"
        )
        if self.connected:
            text += f"; it holds {self.connected} connection(s) to the proxy"
        return text


def env_of(p: Proc) -> dict[str, str]:
    return dict(p.infos[-1][1].env) if p.infos else {}


def _proxy_for(env: dict[str, str], scheme: str) -> tuple[str, str] | None:
    """(variable, value) of the proxy a client uses for `scheme`: lower case wins, then upper,
    then all_proxy (as urllib, requests and httpx read them)."""
    lowered: dict[str, tuple[str, str]] = {}
    for name, value in sorted(env.items(), key=lambda kv: kv[0].islower()):
        if value:
            lowered[name.lower()] = (name, value)
    return lowered.get(f"{scheme}_proxy") or lowered.get("all_proxy")


def _no_proxy(env: dict[str, str]) -> str:
    for name, value in sorted(env.items(), key=lambda kv: not kv[0].islower()):
        if name.lower() == "no_proxy":
            return value
    return ""


def _bypassed(host: str, no_proxy: str) -> bool:
    """Python's own no_proxy rule, given the value instead of reading os.environ (pure)."""
    import urllib.request  # lazy: ~80 ms of imports (http.client, email), used only with a proxy

    rule = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]  # not in typeshed
    return bool(rule(host, {"no": no_proxy}))


def proxy_for_url(env: dict[str, str], url: str) -> tuple[str, str] | None:
    """(variable, value) of the proxy that a client honouring the environment (httpx, requests,
    aiohttp with trust_env, urllib) sends a request for `url` to, or None when it goes direct:
    the scheme's proxy variable, unless no_proxy covers the host (Python's own rule). The one
    place the doctor decides "through a proxy or not" (parts/rollout/lost_requests.py asks it too)."""
    parts = urlsplit(url if "//" in url else f"http://{url}")
    proxy = _proxy_for(env, parts.scheme or "http")
    if proxy is None:
        return None
    no_proxy = _no_proxy(env)
    host = parts.netloc.rpartition("@")[2]
    if no_proxy and _bypassed(host, no_proxy):
        return None
    return proxy


def _targets(world: World, engines: tuple[EngineRead, ...]) -> list[tuple[str, str]]:
    """(label, url) of the job's own HTTP endpoints."""
    out = [(f"engine {e.url}", e.url) for e in engines]
    out += [(f"router {u}", u) for u in world.topology.routers]
    dash = world.snapshot.manifest.target.get("dashboard_url")
    if isinstance(dash, str) and dash:
        out.append((f"dashboard {dash}", dash))
    return out


def _through_proxy(
    env: dict[str, str], targets: list[tuple[str, str]]
) -> tuple[list[str], tuple[str, str] | None]:
    """The labels of the `targets` a client with this environment reaches through a proxy, and
    the first such proxy (variable, value)."""
    hits: list[str] = []
    chosen: tuple[str, str] | None = None
    if not env:
        return hits, chosen
    for label, url in targets:
        proxy = proxy_for_url(env, url)
        if proxy is None:
            continue
        hits.append(label)
        chosen = chosen or proxy
    return hits, chosen


def proxy_hazards(world: World, engines: tuple[EngineRead, ...]) -> tuple[ProxyHazard, ...]:
    targets = _targets(world, engines)
    peers = peer_map(world, engines) if any(p.conns for p in world.procs) else None
    out: list[ProxyHazard] = []
    # what each target does under one proxy setting, worked out once per setting: the ranks of a
    # large job share their environment (issue 46: 1,000 callers x 130 engines at 128 nodes)
    seen: dict[tuple[tuple[str, str], ...], tuple[list[str], tuple[str, str] | None]] = {}
    for p in world.procs:
        if p.role not in _HTTP_CALLERS or p.kind in (MemberKind.SCHEDULER, MemberKind.DETOKENIZER):
            continue
        env = env_of(p)
        key = tuple((k, v) for k, v in env.items() if k.lower().endswith("_proxy"))
        if key not in seen:
            seen[key] = _through_proxy(dict(key), targets)
        hits, chosen = seen[key]
        if not hits or chosen is None:
            continue
        connected = 0
        if peers is not None and p.conns:
            connected = sum(
                1
                for c in p.conns[-1][1]
                if c.socket.state in TCP_WAITING and peers.lookup(c).kind is PeerKind.PROXY
            )
        out.append(ProxyHazard(p, chosen[0], chosen[1], tuple(hits), connected))
    return tuple(out)

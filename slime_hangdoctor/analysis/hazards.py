"""Environment hazards: proxies in front of the job's own endpoints, socket interfaces that differ
across ranks, a nearly full /dev/shm.

- A proxy variable (http_proxy / https_proxy / all_proxy, any case) in a slime process sends its HTTP
  requests to the proxy unless no_proxy covers the host. slime's client (httpx) and the router
  (reqwest) honour them: a proxy on the master node that cannot reach the engines stalls the first
  rollout (slime#1026 maintainer: "check if you have proxy on the master node so that the router
  cannot visit other servers"). Bypass follows Python's own rule (urllib.request
  .proxy_bypass_environment: suffixes, `*`, host:port entries).
- NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME differing across ranks (or set on some only): ranks bind
  their bootstrap sockets to different networks and the group never forms (OpenRLHF#865).
- /dev/shm nearly full: NCCL's shared-memory transport fails in posix_fallocate (or hangs a
  collective where the error is swallowed); PyTorch DataLoader workers die with a bus error.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from slime_hangdoctor.analysis.engines import EngineRead
from slime_hangdoctor.analysis.network import peer_map
from slime_hangdoctor.analysis.source_analysis import SourceAnalysis
from slime_hangdoctor.analysis.world import Proc, World
from slime_hangdoctor.parsers.kernel import SPEC as KERNEL
from slime_hangdoctor.verdict import Finding, Role, Severity

IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
SHM_LOW_BYTES = 1 << 30
SHM_LOW_FRACTION = 0.05
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


def _env(p: Proc) -> dict[str, str]:
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
    place the doctor decides "through a proxy or not" (lost_requests.py asks it too)."""
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


def proxy_hazards(world: World, engines: tuple[EngineRead, ...]) -> tuple[ProxyHazard, ...]:
    targets = _targets(world, engines)
    peers = peer_map(world, engines) if any(p.conns for p in world.procs) else None
    out: list[ProxyHazard] = []
    for p in world.procs:
        if p.role not in _HTTP_CALLERS or p.kind in ("scheduler", "detokenizer"):
            continue
        env = _env(p)
        hits: list[str] = []
        chosen: tuple[str, str] | None = None
        for label, url in targets:
            proxy = proxy_for_url(env, url)
            if proxy is None:
                continue
            hits.append(label)
            chosen = chosen or proxy
        if not hits or chosen is None:
            continue
        connected = 0
        if peers is not None and p.conns:
            connected = sum(
                1
                for c in p.conns[-1][1]
                if c.socket.state in ("ESTABLISHED", "SYN_SENT") and peers.lookup(c).kind == "proxy"
            )
        out.append(ProxyHazard(p, chosen[0], chosen[1], tuple(hits), connected))
    return tuple(out)


def _ifname_mismatches(world: World) -> list[str]:
    ranks = [p for p in world.train_ranks() if p.infos]
    lines: list[str] = []
    for var in IFNAME_VARS:
        values: dict[str, list[str]] = {}
        for p in ranks:
            values.setdefault(_env(p).get(var, "(unset)"), []).append(p.label)
        if len(values) > 1 and set(values) != {"(unset)"}:
            lines.append(
                f"{var} differs across ranks: "
                + "; ".join(f"{v} on {', '.join(sorted(who)[:4])}" for v, who in values.items())
            )
    return lines


def _shm_lines(world: World) -> list[str]:
    lines: list[str] = []
    seen: set[str | None] = set()
    for obs in sorted(world.snapshot.facts(KERNEL), key=lambda o: -o.sample):
        shm = obs.fact.shm
        if obs.node_ip in seen or shm is None or shm.total_bytes <= 0:
            continue
        seen.add(obs.node_ip)
        if shm.free_bytes < SHM_LOW_BYTES or shm.free_bytes < SHM_LOW_FRACTION * shm.total_bytes:
            lines.append(
                f"{shm.path} on {obs.node_ip or 'this node'}: {shm.free_bytes / 2**20:.0f} MiB "
                f"free of {shm.total_bytes / 2**30:.1f} GiB"
            )
    return lines


def hazard_findings(world: World, engines: tuple[EngineRead, ...]) -> list[Finding]:
    out: list[Finding] = []
    proxies = proxy_hazards(world, engines)
    if proxies:
        out.append(
            Finding(
                "proxy-on-job-endpoints",
                Severity.WARNING,
                "Slime processes send requests for the job's own endpoints to a proxy "
                "(their environment has a proxy and no_proxy does not cover these hosts)",
                tuple(h.describe() for h in proxies[:6]),
            )
        )
    if lines := _ifname_mismatches(world):
        out.append(
            Finding(
                "socket-ifname-differs",
                Severity.WARNING,
                "Ranks bind their NCCL / Gloo sockets to different network interfaces",
                tuple(lines),
            )
        )
    if lines := _shm_lines(world):
        out.append(
            Finding(
                "shm-nearly-full",
                Severity.WARNING,
                "/dev/shm is nearly full: NCCL's shared-memory transport and DataLoader workers "
                "need it",
                tuple(lines),
            )
        )
    return out


def hazard_steps(world: World, engines: tuple[EngineRead, ...]) -> list[str]:
    steps: list[str] = []
    if proxy_hazards(world, engines):
        steps.append(
            "Unset http_proxy/https_proxy/all_proxy for the job, or add every engine, router and "
            "head host to no_proxy (e.g. export no_proxy=localhost,127.0.0.1,<node IPs>) before "
            "`ray start` and the job submission (slime#1026)"
        )
    if _ifname_mismatches(world):
        steps.append(
            "Set NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME to the same interface on every node (in "
            "the job's runtime_env env_vars), then restart the job"
        )
    if _shm_lines(world):
        steps.append("Free /dev/shm (ls -la /dev/shm: stale segments of dead jobs) or enlarge it")
    return steps


ANALYSIS = SourceAnalysis(
    findings=lambda r: hazard_findings(r.world, r.engines),
    next_steps=lambda r: hazard_steps(r.world, r.engines),
)

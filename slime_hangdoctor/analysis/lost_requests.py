"""Where the rollout's requests are when the RolloutManager's loop waits on I/O and no engine shows
a request running or queued ("The hangs users actually report", field-hangs.md #7-#9).

An idle event loop with empty engines says only that the requests are somewhere between the two.
The RolloutManager is blamed for that only when nothing else holds them:

- an engine that is dead (its server refuses connections, or is gone) or paused holds them: that
  engine is the culprit, named by its own finder;
- a router that does not answer (or answers 503, no worker) holds them: its own finding;
- the RolloutManager's requests go through an HTTP proxy (proxy variables in its environment that
  `no_proxy` does not exempt the engine hosts from): a finding with its own cause;
- otherwise the requests are in the RolloutManager (a custom generate function or a remote reward
  service it awaits): the RolloutManager stays the suspect, weakly.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from slime_hangdoctor.analysis.engines import EngineRead
from slime_hangdoctor.analysis.world import Proc, World

_PROXY_VARS = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
_NO_PROXY_VARS = ("no_proxy", "NO_PROXY")
# EngineState values that mean the engine holds requests without serving them (issue 18 adds a
# paused state; compared by value so that this module reads either vocabulary)
_HOLDING = frozenset({"dead", "paused"})


class Holder(str, Enum):
    ENGINE = "engine"
    ROUTER = "router"
    PROXY = "proxy"
    ROLLOUT_MANAGER = "rollout_manager"


@dataclass(frozen=True)
class LostRequests:
    holder: Holder
    why: tuple[str, ...]
    url: str | None = None  # the engine or router that holds them
    proxy: str | None = None  # NAME=value of the proxy variable


def _host(url: str) -> str:
    return url.partition("://")[2].rpartition(":")[0].strip("[]")


def _exempt(no_proxy: str, host: str) -> bool:
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*" or entry == host.lower():
            return True
        suffix = entry.lstrip("*")
        if suffix.startswith(".") and host.lower().endswith(suffix):
            return True
    return False


def proxy_in_the_way(rm: Proc, engines: tuple[EngineRead, ...]) -> str | None:
    """`NAME=value` of a proxy variable of the RolloutManager's environment that its requests to
    some engine would go through (Python's requests / httpx / aiohttp with trust_env honour it)."""
    if not rm.infos:
        return None
    env = rm.infos[-1][1].env
    proxy = next(((k, env[k]) for k in _PROXY_VARS if env.get(k)), None)
    if proxy is None:
        return None
    no_proxy = ",".join(env[k] for k in _NO_PROXY_VARS if env.get(k))
    hosts = {_host(e.url) for e in engines}
    if hosts and all(_exempt(no_proxy, h) for h in hosts):
        return None
    return f"{proxy[0]}={proxy[1]}"


def _router_down(world: World) -> tuple[str, str] | None:
    last = max((o.sample for o in world.snapshot.http if o.kind == "router"), default=None)
    by_url: dict[str, list[int | None]] = {}
    for o in world.snapshot.http:
        if o.kind == "router" and o.sample == last:
            by_url.setdefault(o.answer.url, []).append(o.answer.status)
    for url, statuses in by_url.items():
        if all(s is None for s in statuses):
            return url, f"router {url} does not answer"
        if 503 in statuses:
            return url, f"router {url} answers 503 (no available worker)"
    return None


def where_requests_are(world: World, engines: tuple[EngineRead, ...], rm: Proc) -> LostRequests:
    holding = [e for e in engines if e.state.value in _HOLDING]
    if holding:
        e = holding[0]
        return LostRequests(
            Holder.ENGINE,
            (f"engine {e.url} is {e.state.value}: {'; '.join(e.evidence[:2])}",),
            url=e.url,
        )
    if (down := _router_down(world)) is not None:
        return LostRequests(Holder.ROUTER, (down[1],), url=down[0])
    if (proxy := proxy_in_the_way(rm, engines)) is not None:
        return LostRequests(
            Holder.PROXY,
            (
                f"{rm.label} (pid {rm.pid}) runs with {proxy} and no_proxy does not exempt the "
                "engine hosts: its requests go to the proxy, not to the engines",
            ),
            proxy=proxy,
        )
    return LostRequests(
        Holder.ROLLOUT_MANAGER,
        ("every engine answers and none holds a request; no router or proxy is in the way",),
    )

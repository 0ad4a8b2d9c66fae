"""Where the rollout's requests are when the RolloutManager's loop waits on I/O and no engine shows
a request running or queued (issue 16 class 4; "The hangs users actually report", field-hangs.md
#7, #8 and slime#1026).

An idle event loop with empty engines says only that the requests are somewhere between the two:
it is not a culprit by itself. In order, the holder is:

1. an engine that is dead (its server refuses connections, or is gone) or paused: that engine,
   named by its own finder (engines, sglang);
2. an engine whose callers hold connections to it across both samples with evidence of requests
   in flight on them (the engine's HTTP layer, the router, the socket queues, the caller's own
   wait: `network.held_requests`) while its scheduler has no work: that engine, named by the
   sockets finder (an idle keep-alive pool is not one);
3. a router that does not answer, or lists no worker: its own finding (routers finder,
   `parts/routers._router_no_workers`);
4. an HTTP proxy: the RolloutManager's environment sends its requests for the engines to a proxy
   that `no_proxy` does not exempt them from (`hazards.proxy_for_url`, Python's own rule): the
   environ finder and the `requests-at-proxy` cause;
5. a service outside the job that the job's own configuration names (`--rm-url`, a tool server, an
   external engine: `services.job_services`), when the RolloutManager holds connections to it
   across both samples: that service, named as the job names it; the stage is what the rollout
   waits on it for (a reward model: reward);
6. the RolloutManager itself, only when positive evidence points there: Ray's task history shows
   its rollout method running far longer than its earlier runs (`actor_queues`), and its TCP
   connections, read at both samples, hold none to an engine, router or proxy (but an idle pool to
   engines whose HTTP layer counts no request: `network.engine_http_idle`). Then the requests
   never left it: a coroutine awaits something nobody completes (a leaked concurrency slot, a
   future nobody sets, a remote reward service).

Otherwise the holder is unknown, and the reason says which evidence is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from slime_hangdoctor.analysis.actor_queues import RAY_TASKS, OverlongTask, build_view
from slime_hangdoctor.analysis.network import (
    SOCKETS,
    Endpoint,
    KeptConnections,
    PeerKind,
    engine_http_idle,
    held_requests,
    kept_connections,
)
from slime_hangdoctor.analysis.readers.proxies import ENVIRON, proxy_hazards
from slime_hangdoctor.analysis.readers.sglang_http import SGLANG, EngineRead, EngineState
from slime_hangdoctor.analysis.services import Service
from slime_hangdoctor.analysis.source import Source
from slime_hangdoctor.analysis.world import PROCESSES, Proc, World
from slime_hangdoctor.parsers.sglang import HTTP_ANSWERS, HttpPeer
from slime_hangdoctor.topology import CLASS_ROLES
from slime_hangdoctor.verdict import Role

# EngineState values that mean the engine holds requests without serving them
_HOLDING = frozenset({EngineState.DEAD, EngineState.PAUSED, EngineState.HELD})
# peers that would hold the RolloutManager's requests outside it
_CARRIERS = (PeerKind.ENGINE, PeerKind.ROUTER, PeerKind.PROXY)


class Holder(str, Enum):
    ENGINE = "engine"
    ROUTER = "router"
    PROXY = "proxy"
    EXTERNAL = "external"  # a service outside the job (a remote reward model, a tool server)
    ROLLOUT_MANAGER = "rollout_manager"
    UNKNOWN = "unknown"  # no holder found, and not enough evidence to blame the RolloutManager


# who holds the requests when the RolloutManager keeps connections to a carrier of them
_HOLDERS = {
    PeerKind.ENGINE: Holder.ENGINE,
    PeerKind.ROUTER: Holder.ROUTER,
    PeerKind.PROXY: Holder.PROXY,
}


@dataclass(frozen=True)
class LostRequests:
    holder: Holder
    why: tuple[str, ...]  # evidence lines, each prefixed with the source it comes from
    sources: frozenset[Source] = frozenset()  # the sources that decided it
    url: str | None = None  # the engine or router that holds them
    proxy: str | None = None  # NAME=value of the proxy variable
    service: Service | None = None  # the service outside the job that holds them


def _router_down(world: World) -> tuple[str, str] | None:
    last = max(
        (o.sample for o in world.snapshot.joined(HTTP_ANSWERS) if o.kind is HttpPeer.ROUTER),
        default=None,
    )
    by_url: dict[str, list[int | None]] = {}
    for o in world.snapshot.joined(HTTP_ANSWERS):
        if o.kind is HttpPeer.ROUTER and o.sample == last:
            by_url.setdefault(o.answer.url, []).append(o.answer.status)
    for url, statuses in by_url.items():
        if all(s is None for s in statuses):
            return url, f"router {url} does not answer"
        if 503 in statuses:
            return url, f"router {url} answers 503 (no available worker)"
    return None


def _overlong_of(world: World, rm: Proc) -> OverlongTask | None:
    view = build_view(world.snapshot)
    if view is None:
        return None
    return next(
        (
            o
            for o in view.overlong
            if CLASS_ROLES.get(o.actor.class_name) is Role.ROLLOUT_MANAGER
            and (
                o.actor.actor_id == rm.actor_id
                or (o.actor.pid is not None and o.actor.pid == rm.pid)
            )
        ),
        None,
    )


def _in_rm(
    rm: Proc,
    overlong: OverlongTask | None,
    kept: KeptConnections | None,
    engines_line: str,
    pooled: list[tuple[Endpoint, int]],
) -> LostRequests:
    """Blame the RolloutManager only on its task history and its own connections (an idle pool
    to engines that count no request is no connection the requests wait on)."""
    missing: list[str] = []
    if overlong is None:
        missing.append(
            "[ray_tasks] no task history shows its rollout method running far longer than its "
            "earlier runs (a first rollout, or no history read)"
        )
    if kept is None:
        missing.append("[sockets] its TCP connections were not read at both samples")
    if missing:
        return LostRequests(
            Holder.UNKNOWN,
            (
                "the rollout loop waits on I/O and no engine has a request, but nothing shows "
                "who holds the requests",
                *missing,
                *([_pool_line(pooled)] if pooled else []),
                engines_line,
            ),
        )
    assert overlong is not None and kept is not None
    others = [f"{n} to {ep.label}" for ep, n in kept.peers if (ep, n) not in pooled]
    return LostRequests(
        Holder.ROLLOUT_MANAGER,
        (
            f"[ray_tasks] {rm.label} has run {overlong.task.method} for {overlong.elapsed_s:.0f}s; "
            f"its {overlong.earlier_runs} earlier runs took at most "
            f"{overlong.longest_earlier_s:.1f}s",
            "[sockets] it holds no connection to any engine, router or proxy across both samples"
            + (f" (only {', '.join(others[:3])})" if others else ""),
            *([_pool_line(pooled)] if pooled else []),
            "[environ] no proxy variable sends its requests for the engines elsewhere",
            engines_line,
        ),
        frozenset({RAY_TASKS, SOCKETS, ENVIRON, SGLANG}),
    )


def where_requests_are(world: World, engines: tuple[EngineRead, ...], rm: Proc) -> LostRequests:
    """Who holds the rollout's requests (see the module docstring for the order)."""
    holding = [e for e in engines if e.state in _HOLDING]
    if holding:
        e = holding[0]
        return LostRequests(
            Holder.ENGINE,
            (f"[sglang] engine {e.url} is {e.state.value}: {'; '.join(e.evidence[:2])}",),
            frozenset({SGLANG}),
            url=e.url,
        )
    held = held_requests(world, engines)
    if held:
        h = held[0]
        return LostRequests(
            Holder.ENGINE, (f"[sockets] {h.describe()}",), frozenset({SOCKETS}), url=h.engine.url
        )
    if (down := _router_down(world)) is not None:
        return LostRequests(
            Holder.ROUTER, (f"[sglang] {down[1]}",), frozenset({SGLANG}), url=down[0]
        )
    engine_urls = {f"engine {e.url}" for e in engines}
    proxy = next(
        (
            h
            for h in proxy_hazards(world, engines)
            if h.proc.pid == rm.pid and engine_urls & set(h.through_proxy)
        ),
        None,
    )
    if proxy is not None:
        return LostRequests(
            Holder.PROXY,
            (f"[environ] {proxy.describe()}: its requests go to the proxy, not to the engines",),
            frozenset({ENVIRON}),
            proxy=f"{proxy.variable}={proxy.proxy}",
        )
    kept = kept_connections(world, engines, rm)
    pooled = _pooled(world, kept, engines)
    carriers = [c for c in kept.to(*_CARRIERS) if c not in pooled] if kept is not None else []
    if carriers:
        ep, n = carriers[0]
        return LostRequests(
            _HOLDERS[ep.kind],
            (f"[sockets] {rm.label} holds {n} connection(s) to {ep.label} across both samples",),
            frozenset({SOCKETS}),
            url=ep.engine_url,
        )
    idle = [e for e in engines if e.in_flight is not None]
    engines_line = "[sglang] " + "; ".join(
        f"engine {e.url}: {e.running or 0:.0f} running, {e.queued or 0:.0f} queued"
        for e in idle[:4]
    )
    if kept is not None and (outside := kept.to(PeerKind.EXTERNAL)):
        ep, n = outside[0]
        assert ep.service is not None
        return LostRequests(
            Holder.EXTERNAL,
            (
                f"[sockets] {rm.label} (pid {rm.pid}) holds {n} connection(s) across both "
                f"samples to {ep.service.url}, which no process of the job serves: the "
                f"{ep.service.kind.value} named by {ep.service.named_by}",
                engines_line,
            ),
            frozenset({SOCKETS, PROCESSES, SGLANG}),
            url=ep.service.url,
            service=ep.service,
        )
    return _in_rm(rm, _overlong_of(world, rm), kept, engines_line, pooled)


def _pooled(
    world: World, kept: KeptConnections | None, engines: tuple[EngineRead, ...]
) -> list[tuple[Endpoint, int]]:
    """The RolloutManager's connections to engines whose HTTP layer counts no request, and to the
    router when no engine behind it counts one: its client's keep-alive pool (an open connection
    is not a request in flight, issue 27)."""
    if kept is None:
        return []
    pooled = [
        (ep, n)
        for ep, n in kept.to(PeerKind.ENGINE)
        if ep.engine_url is not None and engine_http_idle(world, ep.engine_url)
    ]
    if engines and all(engine_http_idle(world, e.url) for e in engines):
        pooled += list(kept.to(PeerKind.ROUTER))
    return pooled


def _pool_line(pooled: list[tuple[Endpoint, int]]) -> str:
    held = ", ".join(f"{n} to {ep.label}" for ep, n in pooled[:3])
    return (
        f"[sockets] its connections to engines (or their router) are an idle keep-alive pool "
        f"({held}): those engines count no request in flight at their HTTP layer "
        "(sglang:http_requests_active)"
    )

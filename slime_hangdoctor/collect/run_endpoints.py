"""The probes of the job's engines and routers at one sample, started as their URLs are found.

`EndpointProbes` is one sample's: it starts each probe once (the engines the previous sample found
first, then those the scan, the other nodes and the router's worker list name) and holds their
futures for the sample to wait on."""

from __future__ import annotations

import concurrent.futures as cf
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from slime_hangdoctor.collect.node import partial_snapshot
from slime_hangdoctor.collect.run_context import RunContext
from slime_hangdoctor.parsers.processes import SPEC as PROCESSES
from slime_hangdoctor.snapshot import Snapshot
from slime_hangdoctor.topology import Topology, listen_urls, own_listen
from slime_hangdoctor.verdict import Role


class EndpointProbes:
    """The engine and router probes one sample started (`futures`), each (kind, URL) once."""

    def __init__(self, ctx: RunContext, index: int) -> None:
        self.ctx = ctx
        self.index = index
        self.futures: list[cf.Future[Any]] = []
        self._probed: set[tuple[str, str]] = set()

    def start(self, topo: Topology, *, user_urls: bool = True) -> int:
        """Submit the probes of the engines and routers of `topo` not probed yet, and of each
        router's Prometheus page (`router_metrics_urls`); with `user_urls`, also the engines and
        routers the user named (--sglang-url, --router-url). Returns how many it started."""
        from slime_hangdoctor.collect.sglang import (
            probe_engine,
            probe_router,
            probe_router_metrics,
            server_info_held,
        )

        opts, writer, before = self.ctx.opts, self.ctx.writer, len(self.futures)
        given_routers = set(opts.router_urls) if user_urls else set()
        given_engines = set(opts.sglang_urls) if user_urls else set()
        routers = sorted(set(topo.routers) | given_routers)
        engines = {e.url for e in topo.engines} | given_engines
        for url in sorted(engines):
            self._once(
                "engine",
                url,
                probe_engine,
                api_key=opts.api_key,
                health_generate=opts.health_generate,
                health=opts.health,
                held=server_info_held(writer.records, url, self.index),
            )
        # what only a router lists is not the job's (topology.Engine.listed_only): read as any
        # stranger's server is, never sent the API key nor the opt-in calls that touch an engine
        # (a URL the user named is theirs even in the early probes that leave it for later)
        for url in sorted({e.url for e in topo.listed} - engines - set(opts.sglang_urls)):
            held = server_info_held(writer.records, url, self.index)
            self._once("engine", url, probe_engine, api_key=None, listed_by_router=True, held=held)
        for url in routers:
            self._once("router", url, probe_router, api_key=opts.api_key)
        if any(m.role is Role.ROUTER for m in topo.members):  # the state is read only where one is
            for url in router_metrics_urls(partial_snapshot(writer), topo, routers):
                self._once("router-metrics", url, probe_router_metrics)
        return len(self.futures) - before

    def found(self, topo: Topology) -> None:
        """The process scan's callback: probe what it found (`start`)."""
        self.start(topo)

    def _once(self, kind: str, url: str, probe: Callable[..., Any], **kw: Any) -> None:
        if (kind, url) in self._probed:
            return
        self._probed.add((kind, url))
        ctx = self.ctx
        timeout = ctx.deadline.clamp(ctx.opts.probe_timeout_s)
        self.futures.append(
            ctx.pool.submit(
                probe,
                ctx.writer,
                url,
                node_ip=ctx.node_ip,
                sample=self.index,
                timeout=timeout,
                **kw,
            )
        )

    def wait(self, since: int = 0) -> None:
        """Wait (bounded) for the probes started from the `since`-th on."""
        timeout = self.ctx.deadline.clamp(self.ctx.opts.probe_timeout_s * 2 + 1.0)
        cf.wait(self.futures[since:], timeout=timeout)


def start_early_endpoints(ctx: RunContext, index: int, last: Topology | None) -> EndpointProbes:
    """The sample's probes, started with those of the engines that the last sample (`last`)
    found listening (a server process of the job, on any node: on this one, only if it is still
    there), at the second sample (a busy engine holds /server_info for seconds: the longest
    probe of a sample, it starts first). The other engines and the routers are probed once the
    scan has found them, as at the first sample."""
    probes = EndpointProbes(ctx, index)
    if index == 0 or last is None:
        return probes
    alive = tuple(
        e
        for e in last.engines
        if e.source == "proc-listen"
        and e.server_pid is not None
        and (
            e.node_ip not in (None, ctx.node_ip)  # another node's: its probe reads /proc there
            or os.path.exists(f"/proc/{e.server_pid}")
        )
    )
    if alive:
        probes.start(Topology(engines=alive), user_urls=False)
    return probes


def _port_of(url: str) -> int | None:
    try:
        return urlsplit(url if "//" in url else f"//{url}").port
    except ValueError:  # a --router-url with a bad port: probed (and failing) as given
        return None


def router_metrics_urls(state: Snapshot, topo: Topology, routers: list[str]) -> list[str]:
    """The other listening ports of each router process (its role; `sglang::router` titled ones
    have it): where its Prometheus page may be. Its HTTP port (a known router URL) is left out: it
    answers 404 for /metrics; so are the ports it inherited from its parent across the fork
    (slime's router keeps the RolloutManager's Ray gRPC port: `topology.own_listen`)."""
    pids = {(m.node_ip, m.pid) for m in topo.members if m.role is Role.ROUTER}
    served = {_port_of(u) for u in routers}
    out: set[str] = set()
    for obs in state.facts(PROCESSES):
        by_pid = {p.pid: p for p in obs.fact}
        for p in obs.fact:
            if (obs.node_ip, p.pid) not in pids:
                continue
            own = own_listen(p, by_pid.get(p.ppid) if p.ppid is not None else None)
            out.update(u for u in listen_urls(own, obs.node_ip) if _port_of(u) not in served)
    return sorted(out)
